// titan::Error — the one exception type every layer throws on bad input or a
// broken invariant. The CLI turns it into one clear message and a non-zero exit.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace titan {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
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
