#include "titan/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/core/autograd_meta.h"
#include "titan/ops/copy.h"
#include "titan/ops/elementwise.h"

namespace titan::autograd {
namespace {

struct NodeState {
  int pending = 0;             // edges into this node not yet delivered
  std::vector<Tensor> buffer;  // summed gradient per node output
};

// A gradient may arrive wider than its tensor (an f32 gradient for a bf16
// weight straight from the fused loss): sums of mixed dtypes are taken in f32,
// so precision is never thrown away on the way to the f32 master weights.
void accumulate(Tensor& slot, const Tensor& grad) {
  if (!grad.defined()) return;
  if (!slot.defined()) {
    slot = grad;
  } else if (slot.dtype() == grad.dtype()) {
    slot = ops::add(slot, grad);
  } else {
    slot = ops::add(slot.to(DType::f32), grad.to(DType::f32));
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  TITAN_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: {} roots but {} root gradients",
              roots.size(), grad_roots.size());
  // Gradients are never themselves differentiated here.
  NoGradGuard no_grad;

  std::unordered_map<Node*, NodeState> states;
  std::vector<std::shared_ptr<Node>> seeds;
  std::vector<std::pair<Edge, Tensor>> seed_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TITAN_CHECK(root.defined() && root.requires_grad(), "backward: root {} does not require grad", i);
    Tensor grad = grad_roots.empty() ? Tensor() : grad_roots[i];
    if (!grad.defined()) {
      TITAN_CHECK(root.numel() == 1, "backward: root {} of shape {} needs an explicit gradient", i,
                  shape_str(root.shape()));
      grad = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
    }
    TITAN_CHECK(grad.shape() == root.shape(), "backward: gradient {} for root of shape {}", shape_str(grad.shape()),
                shape_str(root.shape()));
    Edge edge = gradient_edge(root);
    seeds.push_back(edge.node);
    seed_grads.emplace_back(edge, grad);
  }

  // Count, for every reachable node, how many edges deliver into it.
  std::vector<Node*> stack;
  for (const auto& seed : seeds) {
    if (states.emplace(seed.get(), NodeState{}).second) stack.push_back(seed.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges) {
      if (!edge.node) continue;
      auto [it, inserted] = states.try_emplace(edge.node.get());
      it->second.pending += 1;
      if (inserted) stack.push_back(edge.node.get());
    }
  }
  for (auto& [node, state] : states) state.buffer.resize(node->num_outputs);
  for (auto& [edge, grad] : seed_grads) accumulate(states[edge.node.get()].buffer[edge.input_nr], grad);

  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)> ready(
      later_first);
  for (const auto& seed : seeds) {
    NodeState& state = states[seed.get()];
    if (state.pending == 0) {
      state.pending = -1;  // queued
      ready.push(seed);
    }
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(states[node.get()].buffer);
    for (const auto& [output, hook] : node->output_hooks) {
      if (!grads[output].defined()) continue;
      Tensor replaced = hook(grads[output]);
      if (replaced.defined()) grads[output] = std::move(replaced);
    }
    std::vector<Tensor> input_grads = node->apply(std::move(grads));
    if (!retain_graph) node->release_saved();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& edge = node->next_edges[i];
      if (!edge.node) continue;
      NodeState& next = states[edge.node.get()];
      if (i < input_grads.size()) accumulate(next.buffer[edge.input_nr], input_grads[i]);
      if (--next.pending == 0) {
        next.pending = -1;
        ready.push(edge.node);
      }
    }
  }
}

void register_hook(const Tensor& tensor, std::function<Tensor(const Tensor&)> hook) {
  TITAN_CHECK(tensor.requires_grad(), "register_hook on a tensor that does not require grad");
  AutogradMeta& meta = tensor.ensure_autograd_meta();
  if (meta.grad_fn) {
    meta.grad_fn->output_hooks.emplace_back(meta.output_nr, std::move(hook));
  } else {
    meta.grad_hooks.push_back(std::move(hook));
  }
}

void register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook) {
  TITAN_CHECK(leaf.is_leaf() && leaf.requires_grad(), "post-accumulate-grad hooks need a leaf that requires grad");
  leaf.ensure_autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace titan::autograd
