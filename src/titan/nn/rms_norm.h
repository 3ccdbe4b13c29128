// RMSNorm over the last dimension with a learned per-feature scale: x / rms(x)
// * (weight_offset + w). Gemma and Muse Glimmer store their scale as w around
// 0 and multiply by (1 + w); Llama and the rest multiply by w itself (offset
// 0). A norm without a learned scale (Muse Glimmer's q/k and embedding norms)
// is x / rms(x) and holds no parameter.
#pragma once

#include <memory>

#include "titan/nn/module.h"

namespace titan::nn {

class RMSNorm;

struct RMSNormConfig {
  int64_t dim = 0;
  double eps = 1e-5;
  double weight_offset = 0.0;
  bool learnable = true;       // false: no weight, the scale is 1
  double initial_scale = 1.0;  // weight_offset + w as drawn (Muse Glimmer's final norm: 0)
  std::shared_ptr<RMSNorm> build(Device device = Device::cpu()) const;
};

class RMSNorm : public Module {
 public:
  RMSNorm(const RMSNormConfig& config, Device device);
  Tensor forward(const Tensor& x) const;

  const RMSNormConfig config;
  Parameter* const weight;  // [dim]; null unless config.learnable
};

}  // namespace titan::nn
