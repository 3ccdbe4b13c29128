#include "titan/autograd/checkpoint.h"

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/autograd/node.h"

namespace titan::autograd {
namespace {

class CheckpointBackward final : public Node {
 public:
  CheckpointBackward(CheckpointFunction fn, std::vector<Tensor> inputs, std::vector<bool> input_requires_grad,
                     std::unique_ptr<SavedOpOutputs> kept)
      : fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        input_requires_grad_(std::move(input_requires_grad)),
        kept_(std::move(kept)) {}

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    EnableGradGuard enable_grad;
    std::vector<Tensor> leaves;
    leaves.reserve(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      Tensor leaf = inputs_[i].detach();
      if (input_requires_grad_[i]) leaf.set_requires_grad(true);
      leaves.push_back(leaf);
    }
    std::vector<Tensor> outputs;
    if (kept_) {
      const SavedOpScope replay(*kept_, true);
      outputs = fn_(leaves);
      replay.check_all_taken();
    } else {
      outputs = fn_(leaves);
    }
    TITAN_CHECK(outputs.size() == grads.size(), "checkpoint: recompute returned {} outputs, forward returned {}",
                outputs.size(), grads.size());
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (grads[i].defined() && outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) backward(roots, root_grads);
    std::vector<Tensor> input_grads;
    input_grads.reserve(leaves.size());
    for (const Tensor& leaf : leaves) input_grads.push_back(leaf.grad());
    return input_grads;
  }
  std::string name() const override { return "CheckpointBackward"; }
  void release_saved() override {
    inputs_.clear();
    fn_ = nullptr;
    kept_.reset();
  }

 private:
  CheckpointFunction fn_;
  std::vector<Tensor> inputs_;
  std::vector<bool> input_requires_grad_;
  std::unique_ptr<SavedOpOutputs> kept_;  // per-op selective checkpointing: what the forward kept
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const SavedOpPolicy* keep_ops) {
  bool any = false;
  for (const Tensor& input : inputs) any = any || (input.defined() && input.requires_grad());
  if (!grad_enabled() || !any) return fn(inputs);

  std::vector<Tensor> outputs;
  std::unique_ptr<SavedOpOutputs> kept;
  {
    NoGradGuard no_grad;
    if (keep_ops != nullptr) {
      kept = std::make_unique<SavedOpOutputs>();
      kept->policy = *keep_ops;
      const SavedOpScope keep(*kept, false);
      outputs = fn(inputs);
    } else {
      outputs = fn(inputs);
    }
  }
  std::vector<bool> needs_grad;
  std::vector<Tensor> saved;
  for (const Tensor& input : inputs) {
    needs_grad.push_back(input.defined() && input.requires_grad());
    saved.push_back(input.defined() ? input.detach() : input);
  }
  auto node = std::make_shared<CheckpointBackward>(fn, std::move(saved), std::move(needs_grad), std::move(kept));
  for (const Tensor& input : inputs) node->next_edges.push_back(input.defined() ? gradient_edge(input) : Edge{});
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    // A fresh view, so an output that is one of the inputs keeps its own history.
    outputs[i] = outputs[i].detach();
    set_history(outputs[i], node, static_cast<uint32_t>(i));
  }
  return outputs;
}

}  // namespace titan::autograd
