// The gated feed-forward block: w2(act(w1 x) * w3 x), with act = silu
// (SwiGLU: Llama, Qwen, Mistral) or tanh-approximate GELU (GeGLU: Gemma).
#pragma once

#include <memory>

#include "titan/core/generator.h"
#include "titan/nn/linear.h"

namespace titan::nn {

class FeedForward;

// The activation applied to the gate (w1) projection. gelu_tanh is Hugging
// Face's hidden_activation "gelu_pytorch_tanh".
enum class FeedForwardActivation { silu, gelu_tanh };

struct FeedForwardConfig {
  int64_t dim = 0;
  int64_t hidden_dim = 0;
  FeedForwardActivation activation = FeedForwardActivation::silu;
  std::shared_ptr<FeedForward> build(Device device = Device::cpu()) const;
};

class FeedForward : public Module {
 public:
  FeedForward(const FeedForwardConfig& config, Device device);
  Tensor forward(const Tensor& x) const;
  // Init rules: w1 (gate) N(0, 0.02); w2 (down) and w3 (up) N(0, output_std) — TorchTitan's choice.
  void set_init(double output_std);

  const FeedForwardConfig config;
  std::shared_ptr<Linear> w1, w2, w3;
};

}  // namespace titan::nn
