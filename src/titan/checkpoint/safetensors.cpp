#include "titan/checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>

namespace titan::checkpoint {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"},     {DType::bf16, "BF16"},      {DType::f16, "F16"}, {DType::f8e4m3, "F8_E4M3"},
    {DType::f8e5m2, "F8_E5M2"}, {DType::i32, "I32"},     {DType::i64, "I64"}, {DType::u8, "U8"},
};

uint64_t read_le64(const char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

}  // namespace

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
  const uint64_t header_size = read_le64(prefix.data());
  TITAN_CHECK(header_size <= kMaxHeaderBytes, "{}: header length {} exceeds the 100 MB limit", source, header_size);
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
    TITAN_CHECK(value.is_object() && value.contains("dtype") && value.contains("shape") &&
                    value.contains("data_offsets"),
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
    TITAN_CHECK(entry.end - entry.begin == bytes, "{}: tensor '{}': {} bytes for shape {} of {} (expected {})",
                source, name, entry.end - entry.begin, shape_str(entry.shape), dtype_name(entry.dtype), bytes);
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

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  std::ifstream file(path_, std::ios::binary | std::ios::ate);
  TITAN_CHECK(file.good(), "cannot open '{}'", path_);
  const auto file_size = static_cast<uint64_t>(file.tellg());
  TITAN_CHECK(file_size >= 8, "{}: not a safetensors file (only {} bytes)", path_, file_size);
  file.seekg(0);
  char length[8];
  file.read(length, 8);
  const uint64_t header_size = std::min<uint64_t>(read_le64(length), std::min(kMaxHeaderBytes, file_size - 8));
  std::string prefix(8 + header_size, '\0');
  file.seekg(0);
  file.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  TITAN_CHECK(file.good(), "{}: failed reading the header", path_);
  header_ = parse_safetensors_header(prefix, file_size, path_);
  for (size_t i = 0; i < header_.entries.size(); ++i) index_[header_.entries[i].name] = i;
}

bool SafetensorsReader::contains(const std::string& name) const { return index_.count(name) != 0; }

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto found = index_.find(name);
  TITAN_CHECK(found != index_.end(), "{}: no tensor named '{}'", path_, name);
  return header_.entries[found->second];
}

void SafetensorsReader::read_bytes(const std::string& name, uint64_t offset, uint64_t size, void* destination) const {
  const SafetensorsEntry& e = entry(name);
  TITAN_CHECK(offset <= e.end - e.begin && size <= e.end - e.begin - offset,
              "{}: read of bytes [{}, {}) outside tensor '{}'", path_, offset, offset + size, name);
  std::ifstream file(path_, std::ios::binary);
  TITAN_CHECK(file.good(), "cannot open '{}'", path_);
  file.seekg(static_cast<std::streamoff>(header_.data_offset + e.begin + offset));
  file.read(static_cast<char*>(destination), static_cast<std::streamsize>(size));
  TITAN_CHECK(file.gcount() == static_cast<std::streamsize>(size), "{}: tensor '{}' is truncated", path_, name);
}

Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor tensor = Tensor::empty(e.shape, e.dtype);
  if (e.end > e.begin) read_bytes(name, 0, e.end - e.begin, tensor.data_ptr());
  return tensor;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    TITAN_CHECK(tensor.defined(), "write_safetensors {}: tensor '{}' is undefined", path, name);
    TITAN_CHECK(!header.contains(name), "write_safetensors {}: duplicate tensor name '{}'", path, name);
    Tensor dense = tensor.to(Device::cpu()).contiguous();
    header[name] = {{"dtype", safetensors_dtype_name(dense.dtype())},
                    {"shape", dense.shape()},
                    {"data_offsets", {offset, offset + dense.nbytes()}}};
    offset += dense.nbytes();
    host.push_back(std::move(dense));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  TITAN_CHECK(file != nullptr, "cannot create '{}'", path);
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  bool ok = std::fwrite(length, 1, 8, file.get()) == 8;
  ok = ok && std::fwrite(text.data(), 1, text.size(), file.get()) == text.size();
  for (const Tensor& t : host) ok = ok && std::fwrite(t.data_ptr(), 1, t.nbytes(), file.get()) == t.nbytes();
  TITAN_CHECK(ok, "write_safetensors: failed writing '{}'", path);
}

}  // namespace titan::checkpoint
