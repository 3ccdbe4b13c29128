// RMSNorm over the last dimension with a learned per-feature scale: x / rms(x)
// * (weight_offset + w). Gemma stores its scale as w around 0 and multiplies
// by (1 + w); Llama and the rest multiply by w itself (offset 0).
#pragma once

#include <memory>

#include "titan/nn/module.h"

namespace titan::nn {

class RMSNorm;

struct RMSNormConfig {
  int64_t dim = 0;
  double eps = 1e-5;
  double weight_offset = 0.0;
  std::shared_ptr<RMSNorm> build(Device device = Device::cpu()) const;
};

class RMSNorm : public Module {
 public:
  RMSNorm(const RMSNormConfig& config, Device device);
  Tensor forward(const Tensor& x) const;

  const RMSNormConfig config;
  Parameter* const weight;  // [dim]
};

}  // namespace titan::nn
