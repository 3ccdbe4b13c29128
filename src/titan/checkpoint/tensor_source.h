// A tensor known by name, dtype and shape before anything reads it. Writers
// that take sources plan their files from the shapes, then read, write and
// drop one tensor at a time: `titan convert` and exports move a model larger
// than memory holding one tensor (or one group an output tensor is made of).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

struct TensorSource {
  std::string name;
  DType dtype;
  Shape shape;
  std::function<Tensor()> read;  // the whole tensor, of `dtype` and `shape`
};
using TensorSources = std::vector<TensorSource>;

// Sources of tensors already in memory.
TensorSources sources_of(const NamedTensors& tensors);

// Writes every source into one safetensors file, in order, one read at a time.
void write_safetensors(const std::string& path, const TensorSources& sources,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace titan::checkpoint
