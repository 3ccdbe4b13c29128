// libFuzzer entry point: checkpoint metadata.json files. Any input is either
// refused with titan::Error or yields tensors whose chunks lie inside the
// tensor, are non-empty, and carry one checksum per block.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto metadata = titan::checkpoint::parse_checkpoint_metadata(text, "fuzz/metadata.json");
    for (const auto& [name, tensor] : metadata.tensors) {
      for (const auto& chunk : tensor.chunks) {
        const uint64_t bytes = titan::checkpoint::chunk_bytes(chunk, tensor.dtype);
        if (bytes == 0 ||
            chunk.checksums.size() != (bytes + metadata.checksum_block_bytes - 1) / metadata.checksum_block_bytes) {
          std::abort();
        }
        for (size_t d = 0; d < tensor.shape.size(); ++d) {
          if (chunk.offsets[d] + chunk.shape[d] > tensor.shape[d]) std::abort();
        }
      }
    }
  } catch (const titan::Error&) {
  }
  return 0;
}
