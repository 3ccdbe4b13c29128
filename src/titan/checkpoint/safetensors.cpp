#include "titan/checkpoint/safetensors.h"

#include "titan/checkpoint/tensor_source.h"

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

SafetensorsReader::SafetensorsReader(std::string path, SafetensorsHeader header)
    : path_(std::move(path)), header_(std::move(header)) {
  for (size_t i = 0; i < header_.entries.size(); ++i) {
    TITAN_CHECK(index_.emplace(header_.entries[i].name, i).second, "{}: tensor '{}' appears twice", path_,
                header_.entries[i].name);
  }
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

std::string SafetensorsWriter::plan(const std::vector<Spec>& specs,
                                    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Spec& spec : specs) {
    TITAN_CHECK(!places_.count(spec.name), "write_safetensors {}: duplicate tensor name '{}'", path_, spec.name);
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(spec.shape)) * dtype_size(spec.dtype);
    header[spec.name] = {{"dtype", safetensors_dtype_name(spec.dtype)},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, offset + bytes}}};
    places_[spec.name] = Place{spec, offset};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  prefix += text;
  for (auto& [name, place] : places_) place.offset += prefix.size();
  file_bytes_ = prefix.size() + offset;
  return prefix;
}

void SafetensorsWriter::fail_writing(const char* what) {
  const int error = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (owns_file_) std::remove(path_.c_str());
  fail("write_safetensors: {} '{}' failed: {}", what, path_, std::strerror(error));
}

void SafetensorsWriter::create(const std::string& prefix) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TITAN_CHECK(fd_ >= 0, "cannot create '{}': {}", path_, std::strerror(errno));
  if (::pwrite(fd_, prefix.data(), prefix.size(), 0) != static_cast<ssize_t>(prefix.size()) ||
      ::ftruncate(fd_, static_cast<off_t>(file_bytes_)) != 0) {
    fail_writing("writing");
  }
}

SafetensorsWriter::SafetensorsWriter(std::string path, const std::vector<Spec>& specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)) {
  create(plan(specs, metadata));
}

SafetensorsWriter::SafetensorsWriter(std::string path, const std::vector<Spec>& specs,
                                     const std::map<std::string, std::string>& metadata,
                                     const std::set<std::string>& part)
    : path_(std::move(path)), owns_file_(false), part_(part) {
  const std::string prefix = plan(specs, metadata);
  for (const std::string& name : part_) {
    TITAN_CHECK(places_.count(name) != 0, "write_safetensors {}: '{}' is not in its header", path_, name);
  }
  TITAN_CHECK(!part_.empty(), "write_safetensors {}: a writer of a part with no tensors", path_);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  TITAN_CHECK(fd_ >= 0, "cannot open '{}' to write its tensors: {}", path_, std::strerror(errno));
  std::string existing(prefix.size(), '\0');
  if (::pread(fd_, existing.data(), existing.size(), 0) != static_cast<ssize_t>(existing.size())) {
    fail_writing("reading the header of");
  }
  if (existing != prefix) {
    ::close(fd_);
    fd_ = -1;
    fail("write_safetensors {}: its header is not the one this writer's tensors need (another model's file?)", path_);
  }
}

void SafetensorsWriter::create_file(const std::string& path, const std::vector<Spec>& specs,
                                    const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer(path, specs, metadata);
  if (::close(writer.fd_) != 0) {
    writer.fd_ = -1;
    writer.fail_writing("writing");
  }
  writer.fd_ = -1;  // made, and left for the writers of its parts
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  if (owns_file_) std::remove(path_.c_str());
}

void SafetensorsWriter::write(const std::string& name, const Tensor& tensor) {
  TITAN_CHECK(fd_ >= 0, "write_safetensors {}: '{}' written after the file was finished or failed", path_, name);
  const auto found = places_.find(name);
  TITAN_CHECK(found != places_.end(), "write_safetensors {}: '{}' is not in its header", path_, name);
  TITAN_CHECK(part_.empty() || part_.count(name) != 0, "write_safetensors {}: '{}' is not in this writer's part", path_,
              name);
  Place& place = found->second;
  TITAN_CHECK(!place.written, "write_safetensors {}: '{}' written twice", path_, name);
  TITAN_CHECK(tensor.defined() && tensor.dtype() == place.spec.dtype && tensor.shape() == place.spec.shape,
              "write_safetensors {}: tensor '{}' is {} {}, its header says {} {}", path_, name,
              tensor.defined() ? dtype_name(tensor.dtype()) : "undefined", shape_str(tensor.shape()),
              dtype_name(place.spec.dtype), shape_str(place.spec.shape));
  const Tensor dense = tensor.to(Device::cpu()).contiguous();
  const auto* bytes = static_cast<const char*>(dense.data_ptr());
  for (size_t done = 0; done < dense.nbytes();) {
    const ssize_t n = ::pwrite(fd_, bytes + done, dense.nbytes() - done, static_cast<off_t>(place.offset + done));
    if (n <= 0) fail_writing("writing");
    done += static_cast<size_t>(n);
  }
  place.written = true;
}

void SafetensorsWriter::finish() {
  for (const auto& [name, place] : places_) {
    TITAN_CHECK(place.written || (!part_.empty() && part_.count(name) == 0),
                "write_safetensors {}: tensor '{}' was never written", path_, name);
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail_writing("writing");
  }
  fd_ = -1;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, sources_of(tensors), metadata);
}

}  // namespace titan::checkpoint
