// libFuzzer entry point: PyTorch Distributed Checkpoint `.metadata` pickles.
// Any input is either refused with titan::Error or yields tensors whose
// chunks lie inside the tensor and cover it, with plain file names for
// storage; and what titan writes back from it parses to the same metadata.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/checkpoint/dcp_metadata.h"
#include "titan/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  using namespace titan::checkpoint;
  DcpMetadata metadata;
  try {
    metadata = parse_dcp_metadata(bytes, "fuzz/.metadata");
  } catch (const titan::Error&) {
    return 0;
  }
  for (const auto& [key, tensor] : metadata.tensors) {
    int64_t covered = 0, numel = 1;
    for (int64_t d : tensor.size) numel *= d;
    for (const DcpChunk& chunk : tensor.chunks) {
      int64_t n = 1;
      for (size_t d = 0; d < tensor.size.size(); ++d) {
        if (chunk.offsets[d] + chunk.sizes[d] > tensor.size[d]) std::abort();
        n *= chunk.sizes[d];
      }
      covered += n;
      if (chunk.storage.relative_path.find('/') != std::string::npos) std::abort();
    }
    if (covered != numel) std::abort();
  }
  // Written back (as titan writes DCP metadata) it parses to the same items.
  if (metadata.version.empty()) metadata.version = "1.0.0";
  const DcpMetadata again = parse_dcp_metadata(write_dcp_metadata(metadata, "fuzz"), "fuzz/rewritten");
  if (again.keys != metadata.keys || again.tensors.size() != metadata.tensors.size() ||
      again.objects.size() != metadata.objects.size() || again.version != metadata.version)
    std::abort();
  for (const auto& [key, tensor] : metadata.tensors) {
    const DcpTensorItem& other = again.tensors.at(key);
    if (other.size != tensor.size || other.dtype_name != tensor.dtype_name ||
        other.chunks.size() != tensor.chunks.size())
      std::abort();
    for (size_t i = 0; i < tensor.chunks.size(); ++i) {
      const DcpChunk &a = tensor.chunks[i], &b = other.chunks[i];
      if (a.offsets != b.offsets || a.sizes != b.sizes || a.storage.relative_path != b.storage.relative_path ||
          a.storage.offset != b.storage.offset || a.storage.length != b.storage.length)
        std::abort();
    }
  }
  return 0;
}
