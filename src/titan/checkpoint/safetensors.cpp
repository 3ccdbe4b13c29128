#include "titan/checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

namespace titan::checkpoint {

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  std::ifstream file(path_, std::ios::binary | std::ios::ate);
  TITAN_CHECK(file.good(), "cannot open '{}'", path_);
  const auto file_size = static_cast<uint64_t>(file.tellg());
  TITAN_CHECK(file_size >= 8, "{}: not a safetensors file (only {} bytes)", path_, file_size);
  file.seekg(0);
  char length[8];
  file.read(length, 8);
  const uint64_t header_size =
      std::min<uint64_t>(read_header_length(length), std::min(kMaxSafetensorsHeaderBytes, file_size - 8));
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
  FILE* file = std::fopen(path.c_str(), "wb");
  TITAN_CHECK(file != nullptr, "cannot create '{}': {}", path, std::strerror(errno));
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  bool ok = std::fwrite(length, 1, 8, file) == 8;
  ok = ok && std::fwrite(text.data(), 1, text.size(), file) == text.size();
  for (const Tensor& t : host) ok = ok && std::fwrite(t.data_ptr(), 1, t.nbytes(), file) == t.nbytes();
  ok = std::fflush(file) == 0 && ok;  // a full disk often shows only when the buffer goes out
  const int write_errno = errno;
  ok = std::fclose(file) == 0 && ok;
  if (!ok) {
    std::remove(path.c_str());  // never leave a truncated file that looks like a model
    fail("write_safetensors: writing '{}' failed: {}", path, std::strerror(write_errno != 0 ? write_errno : errno));
  }
}

}  // namespace titan::checkpoint
