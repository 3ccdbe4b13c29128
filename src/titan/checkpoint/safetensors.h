// The safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then
// the raw little-endian data. Used for checkpoints, HF interop and test fixtures.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::checkpoint {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte range within the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file
};

// Parses and validates a header: `prefix` holds the file's first bytes (at
// least 8 + header length of them), `file_size` the whole size. Checks every
// dtype, shape and byte range (in bounds, matching the shape, not overlapping).
// `source` names the file in errors. Throws titan::Error; never reads out of bounds.
SafetensorsHeader parse_safetensors_header(std::string_view prefix, uint64_t file_size, const std::string& source);

const char* safetensors_dtype_name(DType dtype);
DType parse_safetensors_dtype(std::string_view name, const std::string& source, const std::string& tensor);

class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);
  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  // Reads one tensor into host memory.
  Tensor read(const std::string& name) const;
  // Reads bytes [offset, offset + size) of a tensor's data (for resharding loads).
  void read_bytes(const std::string& name, uint64_t offset, uint64_t size, void* destination) const;

 private:
  std::string path_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes tensors (any device; copied to the host) in the given order.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace titan::checkpoint
