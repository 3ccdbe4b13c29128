// Linear layer without bias (what Llama and Qwen use): y = x @ W^T.
#pragma once

#include <memory>

#include "titan/core/generator.h"
#include "titan/nn/module.h"

namespace titan::nn {

class Linear;

struct LinearConfig {
  int64_t in_features = 0;
  int64_t out_features = 0;
  std::shared_ptr<Linear> build(Device device = Device::cpu()) const;
};

class Linear : public Module {
 public:
  Linear(const LinearConfig& config, Device device);
  Tensor forward(const Tensor& x) const;
  // Truncated normal N(0, std) cut at [low, high] (absolute, as torch.nn.init.trunc_normal_).
  void init_weights(Generator& generator, double std, double low = -2.0, double high = 2.0);

  const LinearConfig config;
  Parameter* const weight;  // [out_features, in_features]
};

}  // namespace titan::nn
