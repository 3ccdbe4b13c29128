#include "titan/checkpoint/safetensors_header.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "titan/core/error.h"

namespace titan::checkpoint {
namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"},        {DType::bf16, "BF16"}, {DType::f16, "F16"}, {DType::f8e4m3, "F8_E4M3"},
    {DType::f8e5m2, "F8_E5M2"}, {DType::i32, "I32"},   {DType::i64, "I64"}, {DType::u8, "U8"},
};

}  // namespace

uint64_t read_header_length(const char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& entry : kDTypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  fail("safetensors: no name for dtype {}", dtype_name(dtype));
}

DType parse_safetensors_dtype(std::string_view name, const std::string& source, const std::string& tensor) {
  for (const auto& entry : kDTypeNames) {
    if (name == entry.name) return entry.dtype;
  }
  fail("{}: tensor '{}' has unsupported dtype '{}'", source, tensor, name);
}

SafetensorsHeader parse_safetensors_header(std::string_view prefix, uint64_t file_size, const std::string& source) {
  TITAN_CHECK(prefix.size() >= 8 && file_size >= 8, "{}: not a safetensors file (shorter than 8 bytes)", source);
  const uint64_t header_size = read_header_length(prefix.data());
  TITAN_CHECK(header_size <= kMaxSafetensorsHeaderBytes, "{}: header length {} exceeds the 100 MB limit", source,
              header_size);
  TITAN_CHECK(header_size <= file_size - 8, "{}: header length {} runs past the end of the {}-byte file", source,
              header_size, file_size);
  TITAN_CHECK(prefix.size() >= 8 + header_size, "{}: header truncated", source);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(prefix.substr(8, header_size));
  } catch (const nlohmann::json::exception& error) {
    fail("{}: header is not valid JSON: {}", source, error.what());
  }
  TITAN_CHECK(json.is_object(), "{}: header is not a JSON object", source);
  SafetensorsHeader header;
  header.data_offset = 8 + header_size;
  const uint64_t data_size = file_size - header.data_offset;
  for (const auto& [name, value] : json.items()) {
    if (name == "__metadata__") {
      TITAN_CHECK(value.is_object(), "{}: __metadata__ is not an object", source);
      for (const auto& [key, text] : value.items()) {
        TITAN_CHECK(text.is_string(), "{}: metadata '{}' is not a string", source, key);
        header.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    TITAN_CHECK(
        value.is_object() && value.contains("dtype") && value.contains("shape") && value.contains("data_offsets"),
        "{}: tensor '{}' lacks dtype, shape or data_offsets", source, name);
    const auto& dtype = value["dtype"];
    const auto& shape = value["shape"];
    const auto& offsets = value["data_offsets"];
    TITAN_CHECK(dtype.is_string(), "{}: tensor '{}': dtype is not a string", source, name);
    TITAN_CHECK(shape.is_array() && offsets.is_array() && offsets.size() == 2,
                "{}: tensor '{}': shape must be an array and data_offsets a pair", source, name);
    SafetensorsEntry entry;
    entry.name = name;
    entry.dtype = parse_safetensors_dtype(dtype.get<std::string>(), source, name);
    uint64_t bytes = dtype_size(entry.dtype);
    for (const auto& size : shape) {
      TITAN_CHECK(size.is_number_unsigned(), "{}: tensor '{}': shape entries must be non-negative integers", source,
                  name);
      const uint64_t dim = size.get<uint64_t>();
      TITAN_CHECK(dim == 0 || bytes <= std::numeric_limits<uint64_t>::max() / dim, "{}: tensor '{}': shape overflows",
                  source, name);
      bytes *= dim;
      TITAN_CHECK(dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "{}: tensor '{}': dim too large",
                  source, name);
      entry.shape.push_back(static_cast<int64_t>(dim));
    }
    TITAN_CHECK(offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
                "{}: tensor '{}': data_offsets must be non-negative integers", source, name);
    entry.begin = offsets[0].get<uint64_t>();
    entry.end = offsets[1].get<uint64_t>();
    TITAN_CHECK(entry.begin <= entry.end && entry.end <= data_size,
                "{}: tensor '{}': bytes [{}, {}) outside the {}-byte data section (file truncated?)", source, name,
                entry.begin, entry.end, data_size);
    TITAN_CHECK(entry.end - entry.begin == bytes, "{}: tensor '{}': {} bytes for shape {} of {} (expected {})", source,
                name, entry.end - entry.begin, fmt::format("[{}]", fmt::join(entry.shape, ", ")),
                dtype_name(entry.dtype), bytes);
    header.entries.push_back(std::move(entry));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < header.entries.size(); ++i) {
    TITAN_CHECK(header.entries[i].begin >= header.entries[i - 1].end, "{}: tensors '{}' and '{}' overlap", source,
                header.entries[i - 1].name, header.entries[i].name);
  }
  return header;
}

}  // namespace titan::checkpoint
