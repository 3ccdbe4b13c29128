#include "titan/autograd/engine.h"

#include <optional>

#include "titan/core/profiler.h"
#include "titan/core/trace_context.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"
#include "titan/core/autograd_meta.h"
#include "titan/core/copy.h"
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

// Which edges a pass follows: all of them, or only those into (or out of) a set of nodes.
using EdgeFilter = std::function<bool(const Node& from, const Edge& edge)>;

// Runs `node` with only the edges `follow` accepts: the others are hidden
// from it for the call, so it neither computes nor returns their gradients.
std::vector<Tensor> apply_along(Node& node, std::vector<Tensor>&& grads, const EdgeFilter& follow) {
  std::vector<Edge> hidden(node.next_edges.size());
  bool any_hidden = false;
  for (size_t i = 0; i < node.next_edges.size(); ++i) {
    if (node.next_edges[i].node && !follow(node, node.next_edges[i])) {
      std::swap(hidden[i], node.next_edges[i]);
      any_hidden = true;
    }
  }
  std::vector<Tensor> input_grads;
  {
    const RunningNode running(&node);
    const trace::ModuleScope module(node.module);
    std::optional<profiler::Span> span;
    if (profiler::active()) {
      span.emplace("backward", node.name());
      span->args()["module"] = node.module != nullptr ? *node.module : std::string();
    }
    input_grads = node.apply(std::move(grads));
  }
  if (any_hidden) {
    for (size_t i = 0; i < hidden.size(); ++i) {
      if (hidden[i].node) {
        node.next_edges[i] = std::move(hidden[i]);
        if (i < input_grads.size()) input_grads[i] = Tensor();
      }
    }
  }
  return input_grads;
}

// One backward pass over the nodes reachable from `seeds` along `follow`:
// each seed starts with its gradients, every node runs once all its followed
// incoming edges delivered, latest-created first. `before_apply` sees each
// node's gradients (after its output hooks) just before it runs.
class GraphPass {
 public:
  explicit GraphPass(EdgeFilter follow) : follow_(std::move(follow)) {}

  void seed(const std::shared_ptr<Node>& node, uint32_t output, const Tensor& grad) {
    NodeState& state = discover(node);
    accumulate(state.buffer[output], grad);
    seeds_.push_back(node);
  }

  void run(bool retain_graph, const std::function<void(Node&, const std::vector<Tensor>&)>& before_apply = {}) {
    // Count, for every reachable node, how many followed edges deliver into it.
    std::vector<Node*> stack;
    std::unordered_set<Node*> visited;
    for (const auto& seed : seeds_) {
      if (visited.insert(seed.get()).second) stack.push_back(seed.get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& edge : node->next_edges) {
        if (!edge.node || !follow_(*node, edge)) continue;
        discover(edge.node).pending += 1;
        if (visited.insert(edge.node.get()).second) stack.push_back(edge.node.get());
      }
    }
    auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
      return a->sequence_nr < b->sequence_nr;
    };
    std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)> ready(
        later_first);
    for (const auto& seed : seeds_) {
      NodeState& state = states_[seed.get()];
      if (state.pending == 0) {
        state.pending = -1;  // queued
        ready.push(seed);
      }
    }
    while (!ready.empty()) {
      std::shared_ptr<Node> node = ready.top();
      ready.pop();
      std::vector<Tensor> grads = std::move(states_[node.get()].buffer);
      for (const auto& [output, hook] : node->output_hooks) {
        if (!grads[output].defined()) continue;
        Tensor replaced = hook(grads[output]);
        if (replaced.defined()) grads[output] = std::move(replaced);
      }
      if (before_apply) before_apply(*node, grads);
      std::vector<Tensor> input_grads = apply_along(*node, std::move(grads), follow_);
      if (!retain_graph) node->release_saved();
      for (size_t i = 0; i < node->next_edges.size(); ++i) {
        const Edge& edge = node->next_edges[i];
        if (!edge.node || !follow_(*node, edge)) continue;
        NodeState& next = states_[edge.node.get()];
        if (i < input_grads.size()) accumulate(next.buffer[edge.input_nr], input_grads[i]);
        if (--next.pending == 0) {
          next.pending = -1;
          ready.push(edge.node);
        }
      }
    }
  }

 private:
  NodeState& discover(const std::shared_ptr<Node>& node) {
    auto [it, inserted] = states_.try_emplace(node.get());
    if (inserted) it->second.buffer.resize(node->num_outputs);
    return it->second;
  }

  EdgeFilter follow_;
  std::unordered_map<Node*, NodeState> states_;
  std::vector<std::shared_ptr<Node>> seeds_;
};

// The edge and gradient each root starts backward with.
std::vector<std::pair<Edge, Tensor>> root_edges(const std::vector<Tensor>& roots,
                                                const std::vector<Tensor>& grad_roots) {
  TITAN_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: {} roots but {} root gradients",
              roots.size(), grad_roots.size());
  std::vector<std::pair<Edge, Tensor>> edges;
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
    edges.emplace_back(gradient_edge(root), grad);
  }
  return edges;
}

bool follow_all(const Node&, const Edge&) { return true; }

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  // Gradients are never themselves differentiated here.
  NoGradGuard no_grad;
  GraphPass pass(follow_all);
  for (const auto& [edge, grad] : root_edges(roots, grad_roots)) pass.seed(edge.node, edge.input_nr, grad);
  pass.run(retain_graph);
}

// The nodes whose gradients still have to be propagated into the weights,
// each with the output gradients it received in the input pass.
struct WeightBackward::Pending {
  std::vector<std::pair<std::shared_ptr<Node>, std::vector<Tensor>>> nodes;
  std::unordered_set<Node*> input_path;  // nodes the input pass ran (their weight edges lead elsewhere)
  bool retain_graph = false;
};

WeightBackward::WeightBackward() = default;
WeightBackward::WeightBackward(std::unique_ptr<Pending> pending) : pending_(std::move(pending)) {}
WeightBackward::WeightBackward(WeightBackward&&) noexcept = default;
WeightBackward& WeightBackward::operator=(WeightBackward&&) noexcept = default;
WeightBackward::~WeightBackward() = default;

bool WeightBackward::empty() const { return !pending_ || pending_->nodes.empty(); }

void WeightBackward::run() {
  TITAN_CHECK(pending_ != nullptr, "WeightBackward::run: already run");
  NoGradGuard no_grad;
  std::unique_ptr<Pending> pending = std::move(pending_);
  const std::unordered_set<Node*>& input_path = pending->input_path;
  // Out of an input-path node only along the edges the input pass skipped;
  // below that, every edge (none of those nodes lead to the inputs).
  GraphPass pass([&input_path](const Node& from, const Edge& edge) {
    return !input_path.count(const_cast<Node*>(&from)) || !input_path.count(edge.node.get());
  });
  // Each pending node is a seed: its gradients are already complete.
  for (auto& [node, grads] : pending->nodes) {
    for (uint32_t output = 0; output < grads.size(); ++output) {
      if (grads[output].defined()) pass.seed(node, output, grads[output]);
    }
  }
  // The seeds' output hooks ran in the input pass: not again.
  std::unordered_map<Node*, decltype(Node::output_hooks)> hooks;
  for (auto& [node, grads] : pending->nodes) hooks[node.get()] = std::exchange(node->output_hooks, {});
  try {
    pass.run(pending->retain_graph);
  } catch (...) {
    for (auto& [node, saved] : hooks) node->output_hooks = std::move(saved);
    throw;
  }
  for (auto& [node, saved] : hooks) node->output_hooks = std::move(saved);
}

WeightBackward backward_input(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
                              const std::vector<Tensor>& inputs, bool retain_graph) {
  NoGradGuard no_grad;
  const std::vector<std::pair<Edge, Tensor>> seeds = root_edges(roots, grad_roots);
  // The nodes on some path from a root to an input's gradient sink.
  std::unordered_set<Node*> targets;
  for (const Tensor& input : inputs) {
    TITAN_CHECK(input.defined() && input.is_leaf() && input.requires_grad(),
                "backward_input: inputs must be leaves that require grad");
    targets.insert(gradient_edge(input).node.get());
  }
  std::unordered_map<Node*, bool> leads;  // memo: does a node reach a target?
  std::function<bool(Node*)> reaches = [&](Node* node) -> bool {
    auto found = leads.find(node);
    if (found != leads.end()) return found->second;
    // Iterative deepening would avoid recursion; graphs of one stage are shallow enough (a few thousand nodes).
    leads[node] = false;
    bool result = targets.count(node) > 0;
    for (const Edge& edge : node->next_edges) {
      if (edge.node && reaches(edge.node.get())) result = true;
    }
    leads[node] = result;
    return result;
  };
  auto pending = std::make_unique<WeightBackward::Pending>();
  pending->retain_graph = true;
  for (const auto& [edge, grad] : seeds) {
    if (edge.node) reaches(edge.node.get());
  }
  for (const auto& [node, on_path] : leads) {
    if (on_path) pending->input_path.insert(node);
  }
  const std::unordered_set<Node*>& input_path = pending->input_path;
  GraphPass pass([&input_path](const Node&, const Edge& edge) { return input_path.count(edge.node.get()) > 0; });
  bool any = false;
  for (const auto& [edge, grad] : seeds) {
    if (input_path.count(edge.node.get())) {
      pass.seed(edge.node, edge.input_nr, grad);
      any = true;
    } else if (edge.node) {
      // A root with no path to the inputs: all of its backward is weight work.
      std::vector<Tensor> grads(edge.node->num_outputs);
      grads[edge.input_nr] = grad;
      pending->nodes.emplace_back(edge.node, std::move(grads));
    }
  }
  // Keep every input-path node whose backward also feeds weights, with its
  // gradients; its saved tensors stay until the weight pass.
  std::vector<std::pair<std::shared_ptr<Node>, std::vector<Tensor>>>& deferred = pending->nodes;
  if (any) {
    pass.run(/*retain_graph=*/true, [&](Node& node, const std::vector<Tensor>& grads) {
      for (const Edge& edge : node.next_edges) {
        if (edge.node && !input_path.count(edge.node.get())) {
          deferred.emplace_back(node.shared_from_this(), grads);
          return;
        }
      }
    });
  }
  pending->retain_graph = retain_graph;
  if (!retain_graph) {
    // Input-path nodes with nothing left for the weight pass are done.
    std::unordered_set<Node*> kept;
    for (const auto& [node, grads] : deferred) kept.insert(node.get());
    for (Node* node : input_path) {
      if (!kept.count(node)) node->release_saved();
    }
  }
  return WeightBackward(std::move(pending));
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
