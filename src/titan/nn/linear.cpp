#include "titan/nn/linear.h"

#include "titan/nn/functional.h"
#include "titan/ops/random.h"

namespace titan::nn {

std::shared_ptr<Linear> LinearConfig::build(Device device) const { return std::make_shared<Linear>(*this, device); }

Linear::Linear(const LinearConfig& config, Device device)
    : config(config),
      weight(
          register_parameter("weight", Tensor::empty({config.out_features, config.in_features}, DType::f32, device))) {
  TITAN_CHECK(config.in_features > 0 && config.out_features > 0, "Linear: sizes must be positive, got {} -> {}",
              config.in_features, config.out_features);
}

Tensor Linear::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  return F::linear(x, weight->materialize());
}

void Linear::init_weights(Generator& generator, double std, double low, double high) {
  ops::trunc_normal_(weight->data, 0.0, std, low, high, generator);
}

}  // namespace titan::nn
