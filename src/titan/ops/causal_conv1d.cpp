#include "titan/ops/causal_conv1d.h"

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace causal_conv1d_checks {

void check(const char* op, const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  check_defined(op, x, "x");
  check_defined(op, weight, "weight");
  check_rank(op, x, 3, "x [B, T, C]");
  check_rank(op, weight, 2, "weight [C, K]");
  check_dtype(op, x, {DType::f32, DType::bf16}, "x");
  check_dtype(op, weight, {DType::f32, DType::bf16}, "weight");
  check_same_device(op, x, weight);
  TITAN_CHECK(weight.size(0) == x.size(2) && weight.size(1) > 0, "{}: weight is {}, expected [C, K] with C = {}", op,
              shape_str(weight.shape()), x.size(2));
  if (document_ids.defined()) {
    TITAN_CHECK(document_ids.shape() == (Shape{x.size(0), x.size(1)}), "{}: document_ids is {}, expected [B, T]", op,
                shape_str(document_ids.shape()));
    check_dtype(op, document_ids, {DType::i32, DType::i64}, "document_ids");
    check_same_device(op, x, document_ids);
  }
}

Tensor contiguous_or_none(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }

}  // namespace causal_conv1d_checks

Tensor causal_conv1d_silu(const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  const trace::OpScope op_scope("causal_conv1d_silu");
  causal_conv1d_checks::check("causal_conv1d_silu", x, weight, document_ids);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!x.device().is_meta() && x.numel() > 0) {
    causal_conv1d_kernels(x.device(), y, x.contiguous(), weight.contiguous(),
                          causal_conv1d_checks::contiguous_or_none(document_ids));
  }
  return y;
}

std::pair<Tensor, Tensor> causal_conv1d_silu_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                                                      const Tensor& document_ids) {
  const char* op = "causal_conv1d_silu_backward";
  const trace::OpScope op_scope(op);
  causal_conv1d_checks::check(op, x, weight, document_ids);
  check_defined(op, grad_y, "grad_y");
  TITAN_CHECK(grad_y.shape() == x.shape(), "{}: grad_y is {}, expected {}", op, shape_str(grad_y.shape()),
              shape_str(x.shape()));
  check_same_dtype(op, grad_y, x);
  check_same_device(op, grad_y, x);
  Tensor grad_x = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor grad_weight = Tensor::empty(weight.shape(), weight.dtype(), weight.device());
  if (!x.device().is_meta()) {
    causal_conv1d_backward_kernels(x.device(), grad_x, grad_weight, grad_y.contiguous(), x.contiguous(),
                                   weight.contiguous(), causal_conv1d_checks::contiguous_or_none(document_ids));
  }
  return {grad_x, grad_weight};
}

}  // namespace titan::ops
