// The safetensors header: an 8-byte little-endian length, then a JSON object
// naming each tensor's dtype, shape and byte range. Parsed and validated here,
// apart from the tensor code, so the parser can be fuzzed on its own.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "titan/core/dtype.h"

namespace titan::checkpoint {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
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

// The header length stored in the first 8 bytes.
uint64_t read_header_length(const char* first_eight_bytes);
// Headers larger than this are rejected (the format's own limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

const char* safetensors_dtype_name(DType dtype);
DType parse_safetensors_dtype(std::string_view name, const std::string& source, const std::string& tensor);

}  // namespace titan::checkpoint
