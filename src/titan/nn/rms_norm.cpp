#include "titan/nn/rms_norm.h"

#include "titan/core/copy.h"
#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<RMSNorm> RMSNormConfig::build(Device device) const { return std::make_shared<RMSNorm>(*this, device); }

RMSNorm::RMSNorm(const RMSNormConfig& config, Device device)
    : config(config),
      weight(config.learnable ? register_parameter("weight", Tensor::empty({config.dim}, DType::f32, device))
                              : nullptr) {
  TITAN_CHECK(config.dim > 0 && config.eps > 0, "RMSNorm: needs dim > 0 and eps > 0 (got {}, {})", config.dim,
              config.eps);
  // Usually the identity: weight_offset + w = 1.
  if (weight) weight->init = InitRule::constant(config.initial_scale - config.weight_offset);
}

Tensor RMSNorm::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  const Tensor in = pre_forward(x);
  if (!weight) {
    // Scaleless: a constant 1 (no gradient is kept for it).
    const Tensor ones = Tensor::full({config.dim}, 1.0, in.dtype(), in.device());
    return post_forward(F::rms_norm(in, ones, static_cast<float>(config.eps)));
  }
  Tensor scale = weight->materialize();
  if (config.weight_offset != 0.0) {
    // Added in the weight's compute dtype; the gradient passes to w unchanged.
    scale = F::add(scale, Tensor::full(scale.shape(), config.weight_offset, scale.dtype(), scale.device()));
  }
  return post_forward(F::rms_norm(in, scale, static_cast<float>(config.eps)));
}

}  // namespace titan::nn
