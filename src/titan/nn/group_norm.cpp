#include "titan/nn/group_norm.h"

#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<GroupNorm> GroupNormConfig::build(Device device) const {
  return std::make_shared<GroupNorm>(*this, device);
}

GroupNorm::GroupNorm(const GroupNormConfig& config, Device device)
    : config(config),
      weight(register_parameter("weight", Tensor::empty({config.num_channels}, DType::f32, device))),
      bias(register_parameter("bias", Tensor::empty({config.num_channels}, DType::f32, device))) {
  TITAN_CHECK(config.num_groups > 0 && config.num_channels > 0 && config.num_channels % config.num_groups == 0,
              "GroupNorm: {} channels do not split into {} groups", config.num_channels, config.num_groups);
  TITAN_CHECK(config.eps > 0, "GroupNorm: eps must be positive (got {})", config.eps);
  weight->init = InitRule::constant(1.0);
  bias->init = InitRule::constant(0.0);
}

Tensor GroupNorm::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  const Tensor in = pre_forward(x);
  return post_forward(
      F::group_norm(in, config.num_groups, weight->materialize(), bias->materialize(), static_cast<float>(config.eps)));
}

}  // namespace titan::nn
