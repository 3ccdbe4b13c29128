// RMSNorm over the last dimension with a learned per-feature scale.
#pragma once

#include <memory>

#include "titan/nn/module.h"

namespace titan::nn {

class RMSNorm;

struct RMSNormConfig {
  int64_t dim = 0;
  double eps = 1e-5;
  std::shared_ptr<RMSNorm> build(Device device = Device::cpu()) const;
};

class RMSNorm : public Module {
 public:
  RMSNorm(const RMSNormConfig& config, Device device);
  Tensor forward(const Tensor& x) const;
  void init_weights();  // ones

  const RMSNormConfig config;
  Parameter* const weight;  // [dim]
};

}  // namespace titan::nn
