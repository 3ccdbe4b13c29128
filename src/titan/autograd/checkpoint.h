// Activation checkpointing: run a block without keeping its intermediate
// activations, and recompute them during backward. Memory for the block's
// activations becomes memory for its inputs only, at the cost of one extra
// forward of the block.
#pragma once

#include <functional>
#include <vector>

#include "titan/autograd/saved_ops.h"
#include "titan/core/tensor.h"

namespace titan::autograd {

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Returns fn(inputs). Under grad mode only the inputs are saved; during
// backward fn is re-run with history on detached copies of them and the
// incoming gradients are propagated through the recomputed graph (parameter
// gradients accumulate as usual). fn must be deterministic (no dropout here).
// With `keep_ops`, the outputs of the ops that policy keeps (saved_ops.h) are
// also saved, and the recompute takes them instead of computing them.
std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const SavedOpPolicy* keep_ops = nullptr);

}  // namespace titan::autograd
