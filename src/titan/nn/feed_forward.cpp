#include "titan/nn/feed_forward.h"

#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<FeedForward> FeedForwardConfig::build(Device device) const {
  return std::make_shared<FeedForward>(*this, device);
}

FeedForward::FeedForward(const FeedForwardConfig& config, Device device) : config(config) {
  w1 = register_module("w1", LinearConfig{config.dim, config.hidden_dim}.build(device));
  w2 = register_module("w2", LinearConfig{config.hidden_dim, config.dim}.build(device));
  w3 = register_module("w3", LinearConfig{config.dim, config.hidden_dim}.build(device));
}

Tensor FeedForward::forward(const Tensor& input) const {
  const ForwardScope scope(*this);
  const Tensor x = pre_forward(input);
  // Up before gate: the order the projections have always run in (it fixes
  // the order of the backward's accumulations, and of LoRA dropout draws).
  const Tensor up = w3->forward(x);
  const Tensor gate = w1->forward(x);
  const Tensor hidden =
      config.activation == FeedForwardActivation::gelu_tanh ? F::geglu(gate, up) : F::swiglu(gate, up);
  return post_forward(w2->forward(hidden));
}

void FeedForward::set_init(double output_std) {
  w1->set_init(0.02);
  w2->set_init(output_std);
  w3->set_init(output_std);
}

}  // namespace titan::nn
