// The backward engine: runs the graph behind `roots` in reverse creation
// order, summing gradients that meet at a node, and accumulates into leaves.
#pragma once

#include <functional>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

// grad_roots[i] is d(objective)/d(roots[i]); an undefined entry means 1 for a
// one-element root. With retain_graph false, saved tensors are freed as used.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

// Registers a hook on the gradient flowing into `tensor` (leaf or not); the
// hook may return a replacement gradient or an undefined tensor to keep it.
void register_hook(const Tensor& tensor, std::function<Tensor(const Tensor&)> hook);
// Runs after a leaf's gradient has been accumulated into leaf.grad().
void register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook);

}  // namespace titan::autograd
