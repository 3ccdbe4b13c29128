#include "titan/nn/rms_norm.h"

#include "titan/nn/functional.h"
#include "titan/ops/copy.h"

namespace titan::nn {

std::shared_ptr<RMSNorm> RMSNormConfig::build(Device device) const { return std::make_shared<RMSNorm>(*this, device); }

RMSNorm::RMSNorm(const RMSNormConfig& config, Device device)
    : config(config), weight(register_parameter("weight", Tensor::empty({config.dim}, DType::f32, device))) {
  TITAN_CHECK(config.dim > 0 && config.eps > 0, "RMSNorm: needs dim > 0 and eps > 0 (got {}, {})", config.dim,
              config.eps);
}

Tensor RMSNorm::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  return F::rms_norm(x, weight->materialize(), static_cast<float>(config.eps));
}

void RMSNorm::init_weights() { ops::fill_(weight->data, 1.0); }

}  // namespace titan::nn
