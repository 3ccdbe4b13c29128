#include "titan/ops/softmax.h"

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {

Tensor softmax(const Tensor& x) {
  const trace::OpScope op_scope("softmax");
  check_defined("softmax", x, "input");
  check_dtype("softmax", x, {DType::f32, DType::bf16}, "input");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!y.device().is_meta()) softmax_kernels(x.device(), y, x.contiguous());
  return y;
}

Tensor softmax_backward(const Tensor& grad_y, const Tensor& y) {
  const trace::OpScope op_scope("softmax_backward");
  check_defined("softmax_backward", grad_y, "grad_y");
  check_same_shape("softmax_backward", grad_y, y);
  check_same_dtype("softmax_backward", grad_y, y);
  Tensor grad_x = Tensor::empty(y.shape(), y.dtype(), y.device());
  if (!grad_x.device().is_meta()) softmax_backward_kernels(y.device(), grad_x, grad_y.contiguous(), y.contiguous());
  return grad_x;
}

}  // namespace titan::ops
