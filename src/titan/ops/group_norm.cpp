#include "titan/ops/group_norm.h"

#include <cmath>

#include "titan/core/trace_context.h"
#include "titan/ops/checks.h"

namespace titan::ops {

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps) {
  const char* op = "group_norm";
  const trace::OpScope op_scope(op);
  check_defined(op, x, "x");
  check_defined(op, weight, "weight");
  check_defined(op, bias, "bias");
  TITAN_CHECK(x.dim() >= 2, "group_norm: x is {}, expected [B, C, ...]", shape_str(x.shape()));
  check_dtype(op, x, {DType::f32, DType::bf16}, "x");
  check_dtype(op, weight, {DType::f32, DType::bf16}, "weight");
  check_dtype(op, bias, {DType::f32, DType::bf16}, "bias");
  check_same_device(op, x, weight);
  check_same_device(op, x, bias);
  const int64_t channels = x.size(1);
  TITAN_CHECK(groups > 0 && channels % groups == 0, "group_norm: {} channels do not split into {} groups", channels,
              groups);
  TITAN_CHECK(weight.shape() == Shape{channels} && bias.shape() == Shape{channels},
              "group_norm: weight {} and bias {} must be [{}]", shape_str(weight.shape()), shape_str(bias.shape()),
              channels);
  TITAN_CHECK(eps >= 0.0f && std::isfinite(eps), "group_norm: eps {} must be finite and non-negative", eps);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (has_work(y))
    group_norm_kernels(x.device(), y, x.contiguous(), groups, weight.contiguous(), bias.contiguous(), eps);
  return y;
}

}  // namespace titan::ops
