// The autograd fields a tensor carries. Core only stores them; the engine in
// autograd/ reads and writes them. Kept in core so a Tensor can hold them
// without core depending on the layer above.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "titan/core/tensor.h"

namespace titan {

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                                     // leaves only: the accumulated gradient
  std::shared_ptr<autograd::Node> grad_fn;         // non-leaves: the node that made this tensor
  uint32_t output_nr = 0;                          // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: their one AccumulateGrad node
  // Leaf hooks run on the incoming gradient before accumulation (may replace it).
  std::vector<std::function<Tensor(const Tensor&)>> grad_hooks;
  // Run after the gradient was accumulated into `grad` (tests use it to corrupt a
  // gradient; FSDP and DDP reduce in their collectives' backward instead).
  std::vector<std::function<void(const Tensor& leaf)>> post_accumulate_hooks;
};

}  // namespace titan
