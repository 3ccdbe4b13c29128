// Writes files torch.load reads: the zip format torch.save has written since
// PyTorch 1.6 (`archive/data.pkl`, one stored member per storage under
// `archive/data/`, `archive/version`), pickled with protocol 2 as torch.save
// pickles. Used for the tensor items of a Distributed Checkpoint (.distcp)
// and for plain state-dict files. Tensors are written contiguous, each with
// a storage of its own; torch.load(..., weights_only=True) accepts them.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "titan/checkpoint/pickle_writer.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

// The torch.<Name>Storage class torch.save names for a dtype ("FloatStorage", "BFloat16Storage", ...).
const char* torch_storage_class(DType dtype);
// The torch.<name> dtype object ("float32", "bfloat16", ...).
const char* torch_dtype_name(DType dtype);

// torch.save(tensor, out): `tensor` (any device, any strides) as a torch
// archive at `out`'s current position; returns the bytes written. `source`
// names the file in errors.
uint64_t write_torch_tensor(std::ostream& out, const Tensor& tensor, const std::string& source);
// torch.save(object, out) of a Python object without tensors (an int, a
// float, a str, a list of floats, ...), given as `data_pkl`, the object's
// pickle (protocol 2): what a DCP folder stores for a non-tensor item.
// Returns the bytes written.
uint64_t write_torch_object(std::ostream& out, const std::string& data_pkl, const std::string& source);
// torch.save(OrderedDict(name: tensor, ...), path).
void write_torch_state_dict(const std::string& path, const NamedTensors& tensors);

// Pushes the pickle of a tensor whose storage is archive member data/<key>:
// torch._utils._rebuild_tensor_v2(storage, 0, shape, strides, False, OrderedDict()).
void pickle_torch_tensor(PickleWriter& pickle, DType dtype, const Shape& shape, const std::string& key);

}  // namespace titan::checkpoint
