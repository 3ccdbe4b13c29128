// titan::Error — the one exception type every layer throws on bad input or a
// broken invariant. The CLI turns it into one clear message and a non-zero exit.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace titan {

// The message as it will be printed: bytes a terminal would act on or a C
// string would end at (control characters other than newline and tab, NUL,
// DEL) and bytes that are not UTF-8 become \xHH, so an error quoting a hostile
// file prints whole and harmless. Idempotent: escapes are plain ASCII.
inline std::string printable_message(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  const auto escape = [&](unsigned char byte) { out += fmt::format("\\x{:02x}", byte); };
  for (size_t i = 0; i < message.size();) {
    const auto byte = static_cast<unsigned char>(message[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) {
        escape(byte);
      } else {
        out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlongs, surrogates or code points past U+10FFFF) is kept whole.
    const size_t length = byte >= 0xc2 && byte <= 0xdf   ? 2
                          : byte >= 0xe0 && byte <= 0xef ? 3
                          : byte >= 0xf0 && byte <= 0xf4 ? 4
                                                         : 0;
    bool valid = length > 0 && i + length <= message.size();
    for (size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(message[i + k]) & 0xc0) == 0x80;
    if (valid && length >= 3) {
      const auto second = static_cast<unsigned char>(message[i + 1]);
      valid = !(byte == 0xe0 && second < 0xa0) && !(byte == 0xed && second >= 0xa0) &&
              !(byte == 0xf0 && second < 0x90) && !(byte == 0xf4 && second >= 0x90);
    }
    if (!valid) {
      escape(byte);
      ++i;
      continue;
    }
    out.append(message.substr(i, length));
    i += length;
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(printable_message(message)) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace titan

// TITAN_CHECK(cond, "fmt", args...) — throws titan::Error with the message when
// cond is false. Use for anything a caller (or a user's file) can get wrong.
#define TITAN_CHECK(cond, ...)    \
  do {                            \
    if (!(cond)) {                \
      ::titan::fail(__VA_ARGS__); \
    }                             \
  } while (0)
