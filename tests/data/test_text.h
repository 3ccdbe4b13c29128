// Deterministic multi-script test text for the tokenizer tests: English prose
// with contractions and numbers, code, whitespace runs, CJK, Hangul, emoji
// (ZWJ sequences, flags, skin tones), Cyrillic, Greek, Arabic, Hebrew,
// Devanagari, Thai, combining marks and non-ASCII digits.
#pragma once

#include <cstdint>
#include <string>

namespace titan::data::testing {

struct TestTextOptions {
  size_t min_bytes = 120 * 1024;
  uint64_t seed = 1;
  // Whitespace that the peers disagree on among themselves (U+0085 is \s for
  // tiktoken's Rust regex but not for JavaScript; U+FEFF the reverse; U+180E
  // for neither in current Unicode): only for comparisons with tiktoken.
  bool disputed_whitespace = false;
};

// Valid UTF-8 of at least min_bytes.
std::string make_test_text(const TestTextOptions& options = {});

// `size` random bytes: mostly text, with invalid UTF-8 (stray continuation
// bytes, truncated sequences, overlongs, surrogates, 0xF5..0xFF) mixed in.
std::string make_random_bytes(size_t size, uint64_t seed);

}  // namespace titan::data::testing
