// A 2-d convolution layer (torch.nn.Conv2d's parameters and names: weight
// [out, in, kh, kw], bias [out]) over F::conv2d: forward only, so it runs in
// frozen image models (the FLUX autoencoder) under autograd::NoGradGuard.
#pragma once

#include <memory>

#include "titan/nn/module.h"
#include "titan/ops/conv2d.h"

namespace titan::nn {

class Conv2d;

struct Conv2dConfig {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel_size = 1;  // square
  int64_t stride = 1;
  int64_t padding = 0;  // on every side; forward(x, padding) takes others
  bool bias = true;
  std::shared_ptr<Conv2d> build(Device device = Device::cpu()) const;
};

class Conv2d : public Module {
 public:
  Conv2d(const Conv2dConfig& config, Device device);
  // x [B, in, H, W] -> [B, out, Ho, Wo].
  Tensor forward(const Tensor& x) const;
  // With padding other than the config's (the FLUX downsampler's (0, 1, 0, 1)).
  Tensor forward(const Tensor& x, const ops::Conv2dPadding& padding) const;

  const Conv2dConfig config;
  Parameter* const weight;  // [out, in, kh, kw]
  Parameter* const bias;    // [out]; null without config.bias
};

}  // namespace titan::nn
