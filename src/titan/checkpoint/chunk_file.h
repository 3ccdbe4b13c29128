// A rank's data file of a sharded checkpoint: the boxes of global tensors it
// holds, in safetensors layout (any safetensors reader can open it), written
// with CRC-32C per block and fsynced; and reading any sub-box back from the
// chunks of a checkpoint, touching only the rows that overlap it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

// A box of a global tensor, held contiguously in host memory.
struct ChunkToWrite {
  std::string name;
  Tensor data;
  std::vector<int64_t> global_shape, offsets;
};

// Writes `chunks` (empty boxes left out) to `path` and fsyncs it; returns each
// written chunk's metadata by tensor name (file = the path's file name).
// `midway` (tests only) runs after about half the bytes are written.
std::vector<std::pair<std::string, ChunkMetadata>> write_chunk_file(const std::string& path,
                                                                    const std::vector<ChunkToWrite>& chunks,
                                                                    uint64_t block_bytes,
                                                                    const std::function<void()>& midway = {});

// Reads boxes of tensors of one checkpoint folder. Errors name the folder,
// file and tensor: missing tensor, shape or dtype mismatch, truncated file,
// checksum mismatch.
class ChunkReader {
 public:
  ChunkReader(std::string folder, const CheckpointMetadata& metadata);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // Fills `target` (contiguous host tensor) with the box of tensor `name` at
  // `offsets`; the checkpoint's global shape and dtype must be `global_shape`
  // and target's dtype.
  void read_box(const std::string& name, const Tensor& target, const std::vector<int64_t>& global_shape,
                const std::vector<int64_t>& offsets);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  int open_file(const std::string& file, uint64_t& size);
  std::string folder_;
  const CheckpointMetadata& metadata_;
  std::map<std::string, std::pair<int, uint64_t>> files_;  // name -> (fd, size)
  uint64_t bytes_read_ = 0;
};

}  // namespace titan::checkpoint
