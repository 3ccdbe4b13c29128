#include "titan/ops/gdn_gates.h"

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace gdn_gates_checks {

GdnGateInputs checked(const char* op, const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  check_defined(op, a_log, "A_log");
  check_defined(op, dt_bias, "dt_bias");
  check_rank(op, a, 3, "a [B, T, H]");
  TITAN_CHECK(b.shape() == a.shape(), "{}: b is {}, expected a's shape {}", op, shape_str(b.shape()),
              shape_str(a.shape()));
  const Shape heads{a.size(2)};
  TITAN_CHECK(a_log.shape() == heads && dt_bias.shape() == heads, "{}: A_log {} and dt_bias {} must be [H] = [{}]", op,
              shape_str(a_log.shape()), shape_str(dt_bias.shape()), a.size(2));
  for (const auto& [t, name] :
       {std::pair{&a, "a"}, std::pair{&b, "b"}, std::pair{&a_log, "A_log"}, std::pair{&dt_bias, "dt_bias"}}) {
    check_dtype(op, *t, {DType::f32, DType::bf16}, name);
    check_same_device(op, a, *t);
  }
  return {a.contiguous(), b.contiguous(), a_log.contiguous(), dt_bias.contiguous()};
}

}  // namespace gdn_gates_checks

GdnGates gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias) {
  const trace::OpScope op_scope("gdn_gates");
  const GdnGateInputs in = gdn_gates_checks::checked("gdn_gates", a, b, a_log, dt_bias);
  GdnGates out{Tensor::empty(a.shape(), DType::f32, a.device()), Tensor::empty(a.shape(), DType::f32, a.device())};
  if (!a.device().is_meta() && a.numel() > 0) gdn_gates_kernels(a.device(), out, in);
  return out;
}

GdnGateGrads gdn_gates_backward(const Tensor& grad_g, const Tensor& grad_beta, const Tensor& a, const Tensor& b,
                                const Tensor& a_log, const Tensor& dt_bias) {
  const char* op = "gdn_gates_backward";
  const trace::OpScope op_scope(op);
  const GdnGateInputs in = gdn_gates_checks::checked(op, a, b, a_log, dt_bias);
  for (const auto& [t, name] : {std::pair{&grad_g, "grad_g"}, std::pair{&grad_beta, "grad_beta"}}) {
    if (!t->defined()) continue;
    TITAN_CHECK(t->shape() == a.shape(), "{}: {} is {}, expected {}", op, name, shape_str(t->shape()),
                shape_str(a.shape()));
    check_dtype(op, *t, {DType::f32, DType::bf16}, name);
    check_same_device(op, a, *t);
  }
  GdnGateGrads grads{Tensor::empty(a.shape(), a.dtype(), a.device()), Tensor::empty(b.shape(), b.dtype(), b.device()),
                     Tensor::empty(a_log.shape(), a_log.dtype(), a.device()),
                     Tensor::empty(dt_bias.shape(), dt_bias.dtype(), a.device())};
  if (!a.device().is_meta()) {
    gdn_gates_backward_kernels(a.device(), grads, grad_g.defined() ? grad_g.contiguous() : Tensor(),
                               grad_beta.defined() ? grad_beta.contiguous() : Tensor(), in);
  }
  return grads;
}

}  // namespace titan::ops
