// Group normalisation with a per-channel scale and shift (torch.nn.GroupNorm
// with affine=True: weight and bias [channels]) over F::group_norm: forward
// only, for frozen image models (the FLUX autoencoder).
#pragma once

#include <memory>

#include "titan/nn/module.h"

namespace titan::nn {

class GroupNorm;

struct GroupNormConfig {
  int64_t num_groups = 32;
  int64_t num_channels = 0;
  double eps = 1e-5;
  std::shared_ptr<GroupNorm> build(Device device = Device::cpu()) const;
};

class GroupNorm : public Module {
 public:
  GroupNorm(const GroupNormConfig& config, Device device);
  // x [B, C, ...] -> the same shape.
  Tensor forward(const Tensor& x) const;

  const GroupNormConfig config;
  Parameter* const weight;  // [C], ones when drawn
  Parameter* const bias;    // [C], zeros when drawn
};

}  // namespace titan::nn
