#include "titan/data/byte_level_alphabet.h"

#include <array>

namespace titan::data {
namespace {

// Code point standing for each byte: bytes that are printable and not space
// ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 take
// U+0100, U+0101, ... in byte order.
struct Alphabet {
  std::array<uint32_t, 256> code_point{};
  std::array<int16_t, 324> byte_of{};  // indexed by code point (all are < 324)

  Alphabet() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      code_point[b] = printable ? b : next++;
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

}  // namespace

void append_byte_level_char(uint8_t b, std::string& out) {
  const uint32_t cp = alphabet().code_point[b];
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {  // all code points are below U+0800: two UTF-8 bytes
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_byte_level_char(static_cast<uint8_t>(c), out);
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  const Alphabet& table = alphabet();
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    uint32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;
    }
    if (cp >= table.byte_of.size() || table.byte_of[cp] < 0) return false;
    out.push_back(static_cast<char>(table.byte_of[cp]));
  }
  return true;
}

}  // namespace titan::data
