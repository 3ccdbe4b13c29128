// The metadata of a sharded checkpoint (metadata.json in a step folder):
// every tensor by name with its global shape and dtype, and the chunks that
// hold it — which file, where in it, which box of the global tensor, and
// CRC-32C checksums per block of bytes so a reader of part of a chunk can
// still verify what it read. Also the non-tensor training state. Parsed and
// validated apart from any I/O, so the parser can be fuzzed on its own.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "titan/core/dtype.h"

namespace titan::checkpoint {

inline constexpr int64_t kCheckpointFormatVersion = 1;

struct ChunkMetadata {
  std::string file;          // a data file in the step folder
  uint64_t byte_offset = 0;  // the chunk's first byte in that file (row-major, contiguous)
  std::vector<int64_t> offsets, shape;
  std::vector<uint32_t> checksums;  // CRC-32C of each checksum_block_bytes block of the chunk's bytes
};

struct TensorMetadata {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // global
  std::vector<ChunkMetadata> chunks;
};

struct CheckpointMetadata {
  int64_t step = 0;
  std::string titan_version;
  uint64_t checksum_block_bytes = 1u << 20;
  std::map<std::string, TensorMetadata> tensors;
  nlohmann::json state = nlohmann::json::object();  // step, scheduler, loader, RNG, mesh, contents
};

std::string checkpoint_metadata_to_json(const CheckpointMetadata& metadata);

// Parses and validates: known dtypes, non-negative shapes, every chunk inside
// its tensor, chunks disjoint and covering it exactly, plain file names, one
// checksum per block. `source` names the file in errors. Throws titan::Error.
CheckpointMetadata parse_checkpoint_metadata(std::string_view text, const std::string& source);

// Bytes in a chunk (its elements times the dtype size).
uint64_t chunk_bytes(const ChunkMetadata& chunk, DType dtype);

}  // namespace titan::checkpoint
