// Files torch.save writes (the zip format of PyTorch >= 1.6): `<root>/data.pkl`
// holds the pickled object, `<root>/data/<key>` each storage's raw bytes,
// stored uncompressed. Read through the restricted unpickler: only the
// globals torch.save writes for tensors and state dicts are accepted
// (torch._utils._rebuild_tensor_v2, torch.<Type>Storage, collections.OrderedDict,
// torch.Size, torch dtypes, ...), so no code in the file runs.
//
// A tensor is found by its byte range in the file: storages are stored, so a
// contiguous tensor is one range, read with pread like a safetensors entry;
// the archive can also sit inside a larger file (a DCP .distcp item).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/checkpoint/pickle_value.h"
#include "titan/checkpoint/safetensors_header.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

class ZipReader;

// A tensor as torch.save stored it.
struct TorchTensorRecord {
  DType dtype = DType::f32;
  std::vector<int64_t> shape, strides;
  int64_t storage_offset = 0;  // in elements
  std::string storage_key;     // data/<key> in the archive
  uint64_t storage_begin = 0;  // the storage's bytes in the file: [begin, begin + bytes)
  uint64_t storage_bytes = 0;
  bool contiguous() const;
  // The tensor's own bytes in the file (contiguous tensors only).
  uint64_t begin() const;
  uint64_t end() const;
};

class TorchArchive {
 public:
  // The archive at [offset, offset + length) of `path` (length 0: to the end of the file).
  explicit TorchArchive(std::string path, uint64_t offset = 0, uint64_t length = 0);
  ~TorchArchive();
  TorchArchive(const TorchArchive&) = delete;
  TorchArchive& operator=(const TorchArchive&) = delete;
  const std::string& path() const { return path_; }
  // data.pkl: tensors appear as objects of torch._utils._rebuild_tensor_v2.
  const PickleValue& root() const { return *pickle_.root; }
  bool is_tensor(const PickleValue& value) const;
  TorchTensorRecord tensor_record(const PickleValue& value) const;
  // Reads a tensor into host memory (any strides), in its stored dtype.
  Tensor read_tensor(const PickleValue& value) const { return read_record(tensor_record(value)); }
  Tensor read_record(const TorchTensorRecord& record) const;
  // The tensors of a state dict: the root dict (or OrderedDict), nested dicts
  // flattened with '.' ("model.layers.0.w"), non-tensor leaves skipped.
  std::vector<std::pair<std::string, TorchTensorRecord>> state_dict_tensors() const;
  // Those tensors as a safetensors header over this file (absolute byte
  // ranges, data_offset 0), so SafetensorsReader can read them and read
  // boxes of them. Refuses non-contiguous tensors, naming them.
  SafetensorsHeader as_safetensors_header() const;

 private:
  std::string path_;
  std::unique_ptr<ZipReader> zip_;
  std::string prefix_;  // "<root>/"
  Pickle pickle_;
};

}  // namespace titan::checkpoint
