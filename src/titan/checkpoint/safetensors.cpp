#include "titan/checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

namespace titan::checkpoint {

namespace {

std::atomic<uint64_t> bytes_read{0};

}  // namespace

uint64_t safetensors_bytes_read() { return bytes_read.load(); }

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
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TITAN_CHECK(fd_ >= 0, "cannot open '{}': {}", path_, std::strerror(errno));
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
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
  auto* to = static_cast<char*>(destination);
  uint64_t at = header_.data_offset + e.begin + offset, left = size;
  while (left > 0) {
    const ssize_t got = ::pread(fd_, to, left, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    TITAN_CHECK(got >= 0, "{}: reading tensor '{}' failed: {}", path_, name, std::strerror(errno));
    TITAN_CHECK(got > 0, "{}: tensor '{}' is truncated", path_, name);
    to += got;
    at += static_cast<uint64_t>(got);
    left -= static_cast<uint64_t>(got);
  }
  bytes_read += size;
}

Tensor SafetensorsReader::read_box(const std::string& name, const Shape& offsets, const Shape& shape) const {
  const SafetensorsEntry& e = entry(name);
  const size_t dims = e.shape.size();
  TITAN_CHECK(offsets.size() == dims && shape.size() == dims, "{}: a box of {} dims in tensor '{}' of shape {}", path_,
              shape.size(), name, shape_str(e.shape));
  for (size_t d = 0; d < dims; ++d) {
    TITAN_CHECK(offsets[d] >= 0 && shape[d] >= 0 && offsets[d] + shape[d] <= e.shape[d],
                "{}: the box {} at {} is outside tensor '{}' of shape {}", path_, shape_str(shape), shape_str(offsets),
                name, shape_str(e.shape));
  }
  Tensor box = Tensor::empty(shape, e.dtype);
  if (box.numel() == 0) return box;
  const uint64_t element = dtype_size(e.dtype);
  // One run: the innermost dims the box spans whole, and the first one it cuts.
  size_t cut = dims == 0 ? 0 : dims - 1;
  while (cut > 0 && shape[cut] == e.shape[cut]) --cut;
  const int64_t run = dims == 0 ? 1 : shape_numel(Shape(shape.begin() + static_cast<std::ptrdiff_t>(cut), shape.end()));
  std::vector<int64_t> strides(dims, 1);
  for (size_t d = dims; d-- > 1;) strides[d - 1] = strides[d] * e.shape[d];
  auto* to = static_cast<char*>(box.data_ptr());
  // Runs next to each other in the file (a box of whole rows) are read as one.
  uint64_t pending_at = 0, pending_bytes = 0;
  std::vector<int64_t> index(cut, 0);  // the run's position in the box's outer dims
  for (int64_t done = 0; done < box.numel(); done += run) {
    int64_t first = dims == 0 ? 0 : offsets[cut] * strides[cut];
    for (size_t d = 0; d < cut; ++d) first += (offsets[d] + index[d]) * strides[d];
    const uint64_t at = static_cast<uint64_t>(first) * element, bytes = static_cast<uint64_t>(run) * element;
    if (pending_bytes > 0 && pending_at + pending_bytes == at) {
      pending_bytes += bytes;
    } else {
      if (pending_bytes > 0) read_bytes(name, pending_at, pending_bytes, to);
      to += pending_bytes;
      pending_at = at;
      pending_bytes = bytes;
    }
    for (size_t d = cut; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  read_bytes(name, pending_at, pending_bytes, to);
  return box;
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
