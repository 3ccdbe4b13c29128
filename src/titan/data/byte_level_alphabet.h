// The GPT-2 "byte-level" alphabet used by Hugging Face tokenizer.json files:
// each of the 256 byte values is written as one printable Unicode character
// (printable Latin-1 bytes stand for themselves, the rest map to U+0100...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data {

// Appends the UTF-8 encoding of byte `b`'s alphabet character to `out`.
void append_byte_level_char(uint8_t b, std::string& out);

// `bytes` written in the byte-level alphabet (what tokenizer.json stores).
std::string bytes_to_byte_level(std::string_view bytes);

// Inverse of bytes_to_byte_level. Returns false (leaving `out` partly written)
// when `text` holds a character outside the alphabet or is not valid UTF-8.
bool byte_level_to_bytes(std::string_view text, std::string& out);

}  // namespace titan::data
