#include "titan/data/utf8.h"

#include <cstring>

namespace titan::data {
namespace {

// Length of the valid UTF-8 sequence starting at text[0], or 0 if it is not one.
size_t sequence_length(const unsigned char* s, size_t n) {
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return 1;
  if (b0 < 0xC2) return 0;  // continuation byte or overlong 2-byte lead
  auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  if (b0 < 0xE0) return cont(1) ? 2 : 0;
  if (b0 < 0xF0) {
    if (n < 2) return 0;
    // E0 needs A0..BF (no overlongs); ED needs 80..9F (no surrogates).
    const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (s[1] < lo || s[1] > hi) return 0;
    return cont(2) ? 3 : 0;
  }
  if (b0 < 0xF5) {
    if (n < 2) return 0;
    // F0 needs 90..BF (no overlongs); F4 needs 80..8F (<= U+10FFFF).
    const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi) return 0;
    return cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

size_t valid_utf8_prefix(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, eight bytes at a time: most text is mostly ASCII.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t length = sequence_length(s + i, n - i);
    if (length == 0) break;
    i += length;
  }
  return i;
}

size_t invalid_utf8_prefix(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n && sequence_length(s + i, n - i) == 0) ++i;
  return i;
}

}  // namespace titan::data
