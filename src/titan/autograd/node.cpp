#include "titan/autograd/node.h"

#include "titan/core/trace_context.h"

#include "titan/autograd/grad_mode.h"
#include "titan/core/autograd_meta.h"
#include "titan/ops/elementwise.h"

namespace titan::autograd {
namespace {
std::atomic<uint64_t> next_sequence_nr{0};
thread_local const Node* running_node = nullptr;
}  // namespace

RunningNode::RunningNode(const Node* node) : previous_(running_node) { running_node = node; }
RunningNode::~RunningNode() { running_node = previous_; }

bool input_grad_wanted(size_t input) { return running_node == nullptr || running_node->needs_input_grad(input); }

Node::Node() : sequence_nr(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)), module(trace::current_module()) {}

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor grad = std::move(grads[0]);
  if (!grad.defined()) return {};
  AutogradMeta& meta = leaf_.ensure_autograd_meta();
  for (const auto& hook : meta.grad_hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = std::move(replaced);
  }
  TITAN_CHECK(grad.shape() == leaf_.shape(), "AccumulateGrad: gradient of shape {} for a leaf of shape {}",
              shape_str(grad.shape()), shape_str(leaf_.shape()));
  if (!meta.grad.defined()) {
    // Take the buffer when nobody else can see it; otherwise copy, so later
    // in-place accumulation cannot write into another tensor's memory.
    const bool exclusive = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 &&
                           grad.is_contiguous() && grad.dtype() == leaf_.dtype();
    if (exclusive) {
      meta.grad = grad;
    } else {
      meta.grad = grad.dtype() == leaf_.dtype() ? grad.clone() : grad.to(leaf_.dtype());
    }
  } else if (meta.grad.dtype() == grad.dtype() || meta.grad.dtype() == DType::f32) {
    ops::add_(meta.grad, grad);
  } else {
    ops::add_(meta.grad, grad.to(meta.grad.dtype()));
  }
  for (const auto& hook : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

Edge gradient_edge(const Tensor& tensor) {
  AutogradMeta* meta = tensor.autograd_meta();
  if (meta == nullptr) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  std::shared_ptr<Node> accumulator = meta->grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(tensor);
    meta->grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

void set_history(Tensor& output, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& meta = output.ensure_autograd_meta();
  TITAN_CHECK(meta.grad_fn == nullptr && !meta.requires_grad,
              "set_history: output of {} already has autograd history (an op returned its input?)", node->name());
  meta.grad_fn = node;
  meta.output_nr = output_nr;
}

}  // namespace titan::autograd
