#include "titan/nn/conv2d.h"

#include <cmath>

#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<Conv2d> Conv2dConfig::build(Device device) const { return std::make_shared<Conv2d>(*this, device); }

Conv2d::Conv2d(const Conv2dConfig& config, Device device)
    : config(config),
      weight(register_parameter(
          "weight", Tensor::empty({config.out_channels, config.in_channels, config.kernel_size, config.kernel_size},
                                  DType::f32, device))),
      bias(config.bias ? register_parameter("bias", Tensor::empty({config.out_channels}, DType::f32, device))
                       : nullptr) {
  TITAN_CHECK(config.in_channels > 0 && config.out_channels > 0 && config.kernel_size > 0 && config.stride > 0 &&
                  config.padding >= 0,
              "Conv2d: channels {} -> {}, kernel {}, stride {} must be positive and padding {} non-negative",
              config.in_channels, config.out_channels, config.kernel_size, config.stride, config.padding);
  // torch.nn.Conv2d's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both.
  const double bound =
      1.0 / std::sqrt(static_cast<double>(config.in_channels * config.kernel_size * config.kernel_size));
  weight->init = InitRule::uniform(-bound, bound);
  if (bias) bias->init = InitRule::uniform(-bound, bound);
}

Tensor Conv2d::forward(const Tensor& x) const {
  return forward(x, ops::Conv2dPadding::same_on_every_side(config.padding));
}

Tensor Conv2d::forward(const Tensor& x, const ops::Conv2dPadding& padding) const {
  const ForwardScope scope(*this);
  const Tensor in = pre_forward(x);
  return post_forward(F::conv2d(in, weight->materialize(), bias ? bias->materialize() : Tensor(),
                                ops::Conv2dOptions{.stride = config.stride, .padding = padding}));
}

}  // namespace titan::nn
