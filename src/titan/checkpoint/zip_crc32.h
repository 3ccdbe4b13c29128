// CRC-32 as zip stores it (the IEEE 802.3 polynomial, reflected; not the
// Castagnoli CRC titan's own checkpoint chunks use, crc32c.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace titan::checkpoint {

// Extends `crc` (0 to start) over `size` bytes.
uint32_t zip_crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace titan::checkpoint
