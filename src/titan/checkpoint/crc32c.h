// CRC-32C (Castagnoli), the checksum of checkpoint chunks: the SSE4.2 crc32
// instruction computes it at memory speed, so verifying a load costs little;
// a table-driven path serves CPUs without it and is the tests' reference.
#pragma once

#include <cstddef>
#include <cstdint>

namespace titan::checkpoint {

// Continues a CRC-32C over `size` bytes: crc32c(b, crc32c(a)) == crc32c(a ++ b). Start with 0.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The portable byte-at-a-time version (same results).
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

}  // namespace titan::checkpoint
