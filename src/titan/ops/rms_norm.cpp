#include "titan/ops/rms_norm.h"

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {

RmsNormOutput rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  const trace::OpScope op_scope("rms_norm");
  check_defined("rms_norm", x, "x");
  check_defined("rms_norm", weight, "weight");
  check_rank("rms_norm", weight, 1, "weight");
  TITAN_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(0), "rms_norm: x {} does not end in weight's size {}",
              shape_str(x.shape()), weight.size(0));
  check_same_dtype("rms_norm", x, weight);
  check_same_device("rms_norm", x, weight);
  Shape rows_shape(x.shape().begin(), x.shape().end() - 1);
  RmsNormOutput result{Tensor::empty(x.shape(), x.dtype(), x.device()),
                       Tensor::empty(rows_shape, DType::f32, x.device())};
  if (!x.device().is_meta())
    rms_norm_kernels(x.device(), result.y, result.rstd, x.contiguous(), weight.contiguous(), eps);
  return result;
}

RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  const trace::OpScope op_scope("rms_norm_backward");
  check_defined("rms_norm_backward", grad_y, "grad_y");
  check_same_shape("rms_norm_backward", grad_y, x);
  check_same_dtype("rms_norm_backward", grad_y, x);
  RmsNormGrads grads{Tensor::empty(x.shape(), x.dtype(), x.device()),
                     Tensor::empty(weight.shape(), weight.dtype(), weight.device())};
  if (!x.device().is_meta()) {
    rms_norm_backward_kernels(x.device(), grads.grad_x, grads.grad_weight, grad_y.contiguous(), x.contiguous(),
                              weight.contiguous(), rstd.contiguous());
  }
  return grads;
}

}  // namespace titan::ops
