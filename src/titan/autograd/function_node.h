// A backward node whose body is a lambda: most differentiable functions need
// nothing more than "given the output gradients and what I captured, return
// the input gradients". Capture saved tensors detached (Tensor::detach) so the
// graph holds data, not history.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "titan/autograd/node.h"

namespace titan::autograd {

using BackwardFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, uint32_t outputs = 1) : name_(std::move(name)) { num_outputs = outputs; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    TITAN_CHECK(body_ != nullptr, "{}: backward run twice (use retain_graph to keep saved tensors)", name_);
    return body_(grads);
  }
  std::string name() const override { return name_; }
  void release_saved() override { body_ = nullptr; }
  void set_body(BackwardFunction body) { body_ = std::move(body); }

 private:
  std::string name_;
  BackwardFunction body_;
};

// Records `body` as the backward of `outputs` from `inputs` when any input
// requires grad under grad mode; otherwise does nothing. Returns whether it did.
bool record(const char* name, std::initializer_list<const Tensor*> inputs, std::initializer_list<Tensor*> outputs,
            BackwardFunction body);

}  // namespace titan::autograd
