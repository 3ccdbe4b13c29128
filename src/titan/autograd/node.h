// A node of the backward graph: the backward of one forward operation. Its
// next_edges point at the nodes that produced its inputs (or at the
// AccumulateGrad node of a leaf), one edge per differentiable input.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/autograd/grad_mode.h"
#include "titan/core/tensor.h"

namespace titan::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;       // which output of `node` the gradient feeds
};

class Node;
// While alive, `node` is the one whose backward this thread runs (for input_grad_wanted).
class RunningNode {
 public:
  explicit RunningNode(const Node* node);
  ~RunningNode();
  RunningNode(const RunningNode&) = delete;
  RunningNode& operator=(const RunningNode&) = delete;

 private:
  const Node* previous_;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Takes one gradient per forward output (undefined where none arrived) and
  // returns one per next_edges entry (undefined where the input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors once backward has used them (unless the graph is retained).
  virtual void release_saved() {}

  bool needs_input_grad(size_t input) const { return input < next_edges.size() && next_edges[input].node; }

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  // Creation order: the engine runs later nodes first, so gradients flow in
  // reverse forward order (what FSDP prefetching relies on).
  uint64_t sequence_nr;
  // The module whose forward created this node (trace::current_module then):
  // its backward is shown and its allocations attributed under that name.
  const std::string* module;
  // Hooks on the gradient of output `first` (tensor hooks on non-leaf tensors).
  std::vector<std::pair<uint32_t, std::function<Tensor(const Tensor&)>>> output_hooks;
};

// The sink of a leaf's gradient: runs the leaf's hooks, accumulates into
// leaf.grad() (taking the incoming buffer when nothing else holds it), then
// runs the post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  Tensor leaf_;
};

// The edge along which a gradient for `tensor` flows: its grad_fn for a
// non-leaf, its (shared, lazily created) AccumulateGrad for a leaf that
// requires grad, and an empty edge otherwise.
Edge gradient_edge(const Tensor& tensor);

// For differentiable functions: creates the backward node when grad mode is on
// and some input requires grad (else returns null), with one edge per input.
template <typename NodeType, typename... Args>
std::shared_ptr<NodeType> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  bool any = false;
  for (const Tensor* input : inputs) any = any || (input->defined() && input->requires_grad());
  if (!any || !grad_enabled()) return nullptr;
  auto node = std::make_shared<NodeType>(std::forward<Args>(args)...);
  node->next_edges.reserve(inputs.size());
  for (const Tensor* input : inputs) node->next_edges.push_back(input->defined() ? gradient_edge(*input) : Edge{});
  return node;
}

// Inside a backward body: whether this run of the node wants the gradient of
// its input `input`. A split backward (engine.h) runs a node twice, once for
// the input path and once for the weights, hiding the other edges each time:
// bodies whose gradients are separate computations (a linear's two GEMMs)
// skip the unwanted one. Outside a backward run: true.
bool input_grad_wanted(size_t input);

// Marks `output` as output `output_nr` of `node`. The output must be a fresh
// tensor (no history of its own).
void set_history(Tensor& output, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);

}  // namespace titan::autograd
