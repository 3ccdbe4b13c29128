// Reading and writing safetensors files (Hugging Face's format: a JSON header,
// then raw little-endian tensor data). Used for checkpoints, HF interop and
// test fixtures. The header parser is in safetensors_header.h.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "titan/checkpoint/safetensors_header.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

// Keeps the file open: reads are ranged (pread), so reading a shard of a
// tensor touches only that shard's bytes.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);
  // Tensors at known byte ranges of a file in another format (a torch.save
  // archive: TorchArchive::as_safetensors_header), read the same way.
  SafetensorsReader(std::string path, SafetensorsHeader header);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  // Reads one tensor into host memory.
  Tensor read(const std::string& name) const;
  // Reads bytes [offset, offset + size) of a tensor's data (for resharding loads).
  void read_bytes(const std::string& name, uint64_t offset, uint64_t size, void* destination) const;
  // Reads the box of `shape` at `offsets` of a tensor (row-major, in the
  // file's dtype), one ranged read per run of bytes contiguous in the file:
  // what a rank does to load only its shard.
  Tensor read_box(const std::string& name, const Shape& offsets, const Shape& shape) const;

 private:
  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

// Bytes of tensor data this process has read from safetensors files so far
// (headers not counted): how tests see that a rank read only its shards.
uint64_t safetensors_bytes_read();

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A file whose tensors are written one at a time, in any order, each at its
// place (known from the header, written first): an export can stream a
// sharded model tensor by tensor, never holding it whole. finish() checks
// that every tensor was written; a writer destroyed before finish() removes
// the file, so no truncated file looks like a model.
//
// Several writers can fill one file (each pipeline stage writes the tensors
// it holds into one export): create_file makes it, then each
// writer opens it with its `part`, and its finish() checks that part. Such a
// writer leaves the file alone when it fails; whoever created it removes it.
// create_file makes the file.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype;
    Shape shape;
  };
  SafetensorsWriter(std::string path, const std::vector<Spec>& specs,
                    const std::map<std::string, std::string>& metadata = {});
  // Opens a file create_safetensors_file made with the same specs and
  // metadata (its header must be the same) to write the tensors of `part`.
  SafetensorsWriter(std::string path, const std::vector<Spec>& specs,
                    const std::map<std::string, std::string>& metadata, const std::set<std::string>& part);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  // `tensor` (any device; copied to the host) must have its spec's dtype and shape.
  void write(const std::string& name, const Tensor& tensor);
  void finish();
  // Creates `path` with the header of `specs` and room for their data, for
  // writers of parts to fill.
  static void create_file(const std::string& path, const std::vector<Spec>& specs,
                          const std::map<std::string, std::string>& metadata = {});

 private:
  struct Place {
    Spec spec;
    uint64_t offset = 0;  // in the file
    bool written = false;
  };
  // The header bytes (length prefix, JSON, padding) and every tensor's place.
  std::string plan(const std::vector<Spec>& specs, const std::map<std::string, std::string>& metadata);
  void create(const std::string& prefix);
  [[noreturn]] void fail_writing(const char* what);
  std::string path_;
  int fd_ = -1;
  bool owns_file_ = true;  // created it (removed on failure)
  uint64_t file_bytes_ = 0;
  std::map<std::string, Place> places_;
  std::set<std::string> part_;  // empty: every tensor
};

// Writes tensors (any device; copied to the host) in the given order.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace titan::checkpoint
