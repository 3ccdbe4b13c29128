#include "titan/checkpoint/zip_crc32.h"

#include <array>

namespace titan::checkpoint {

namespace {

std::array<uint32_t, 256> make_zip_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t value = i;
    for (int bit = 0; bit < 8; ++bit) value = (value & 1) != 0 ? 0xEDB88320u ^ (value >> 1) : value >> 1;
    table[i] = value;
  }
  return table;
}

}  // namespace

uint32_t zip_crc32(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_zip_crc_table();
  const auto* bytes = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace titan::checkpoint
