// The backward engine: runs the graph behind `roots` in reverse creation
// order, summing gradients that meet at a node, and accumulates into leaves.
// Zero-bubble pipeline schedules split one backward in two: backward_input
// computes only what the gradients of given inputs need (so the previous
// pipeline stage can start), and the returned WeightBackward later computes
// the rest, the weights' gradients, from the gradients it kept. Both halves
// run each node's own backward, so the result is bitwise the fused backward's.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

// grad_roots[i] is d(objective)/d(roots[i]); an undefined entry means 1 for a
// one-element root. With retain_graph false, saved tensors are freed as used.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

// The weight half of a split backward: owns the nodes whose weight edges the
// input half skipped, with their gradients, and the saved tensors they need.
class WeightBackward {
 public:
  struct Pending;
  WeightBackward();
  explicit WeightBackward(std::unique_ptr<Pending> pending);
  WeightBackward(WeightBackward&&) noexcept;
  WeightBackward& operator=(WeightBackward&&) noexcept;
  ~WeightBackward();

  // Accumulates every remaining gradient into its leaf (once).
  void run();
  bool empty() const;

 private:
  std::unique_ptr<Pending> pending_;
};

// The input half: gradients flow only along paths from `roots` to `inputs`
// (leaves that require grad; their gradients land in input.grad()). Nodes on
// those paths compute only their input-path gradients; what they owe other
// edges (weights) is returned, to run later. A root with no path to an input
// is deferred whole.
WeightBackward backward_input(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
                              const std::vector<Tensor>& inputs, bool retain_graph = false);

// Registers a hook on the gradient flowing into `tensor` (leaf or not); the
// hook may return a replacement gradient or an undefined tensor to keep it.
void register_hook(const Tensor& tensor, std::function<Tensor(const Tensor&)> hook);
// Runs after a leaf's gradient has been accumulated into leaf.grad().
void register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook);

}  // namespace titan::autograd
