// UTF-8 validation for the tokenizer: the pre-tokenizer regex only ever sees
// well-formed UTF-8, so input is cut into valid runs and invalid byte runs first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace titan::data {

// Length of the longest prefix of `text` that is well-formed UTF-8 (RFC 3629:
// no overlongs, no surrogates, nothing above U+10FFFF).
size_t valid_utf8_prefix(std::string_view text);

// Length of the run of bytes at the start of `text` that cannot begin a valid
// UTF-8 sequence (the "maximal subparts" rule: an invalid sequence ends at the
// first byte that cannot continue it). 0 when `text` starts with a valid character.
size_t invalid_utf8_prefix(std::string_view text);

}  // namespace titan::data
