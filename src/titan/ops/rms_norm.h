// RMSNorm over the last dimension: y = x * rsqrt(mean(x^2) + eps) * weight.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

struct RmsNormOutput {
  Tensor y;     // x's shape and dtype
  Tensor rstd;  // [rows] f32: saved for backward
};
struct RmsNormGrads {
  Tensor grad_x;       // x's dtype
  Tensor grad_weight;  // weight's dtype, accumulated in f32
};

// x [..., D] and weight [D] share a dtype (f32 or bf16).
RmsNormOutput rms_norm(const Tensor& x, const Tensor& weight, float eps);
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd);

using RmsNormKernel = void(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, float eps);
using RmsNormBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_y,
                                   const Tensor& x, const Tensor& weight, const Tensor& rstd);
inline Op<RmsNormKernel> rms_norm_kernels{"rms_norm"};
inline Op<RmsNormBackwardKernel> rms_norm_backward_kernels{"rms_norm_backward"};

}  // namespace titan::ops
