#include "titan/ops/elementwise.h"

#include <cmath>

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace {

// Operands of an elementwise op: same shape, dtype and device; made contiguous.
void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  check_same_shape(op, a, b);
  check_same_dtype(op, a, b);
  check_same_device(op, a, b);
}

Tensor binary(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  const trace::OpScope op_scope(name);
  check_pair(name, a, b);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (!out.device().is_meta()) binary_kernels(out.device(), op, out, a.contiguous(), b.contiguous(), 1.0f);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, "add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, "sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, "mul", a, b); }

void add_(const Tensor& dst, const Tensor& src, float alpha) {
  const trace::OpScope op_scope("add");
  check_defined("add_", dst, "destination");
  check_defined("add_", src, "source");
  check_same_shape("add_", dst, src);
  check_same_device("add_", dst, src);
  TITAN_CHECK(dst.dtype() == src.dtype() || (dst.dtype() == DType::f32 && src.dtype() == DType::bf16),
              "add_: cannot accumulate {} into {} (shape {})", dtype_name(src.dtype()), dtype_name(dst.dtype()),
              shape_str(dst.shape()));
  check_contiguous("add_", dst, "destination");
  if (!dst.device().is_meta()) binary_kernels(dst.device(), BinaryOp::add, dst, dst, src.contiguous(), alpha);
}

Tensor scale(const Tensor& a, float factor) {
  const trace::OpScope op_scope("scale");
  check_defined("scale", a, "input");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (!out.device().is_meta()) scale_kernels(out.device(), out, a.contiguous(), factor);
  return out;
}

void scale_(const Tensor& dst, float factor) {
  check_defined("scale_", dst, "destination");
  check_contiguous("scale_", dst, "destination");
  if (!dst.device().is_meta()) scale_kernels(dst.device(), dst, dst, factor);
}

Tensor silu(const Tensor& x) {
  const trace::OpScope op_scope("silu");
  check_defined("silu", x, "input");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!out.device().is_meta()) silu_kernels(out.device(), out, x.contiguous());
  return out;
}

Tensor silu_backward(const Tensor& grad_out, const Tensor& x) {
  const trace::OpScope op_scope("silu_backward");
  check_pair("silu_backward", grad_out, x);
  Tensor grad_x = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!grad_x.device().is_meta()) silu_backward_kernels(x.device(), grad_x, grad_out.contiguous(), x.contiguous());
  return grad_x;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  const trace::OpScope op_scope("swiglu");
  check_pair("swiglu", gate, up);
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  if (!out.device().is_meta()) swiglu_kernels(out.device(), out, gate.contiguous(), up.contiguous());
  return out;
}

std::pair<Tensor, Tensor> swiglu_backward(const Tensor& grad_out, const Tensor& gate, const Tensor& up) {
  const trace::OpScope op_scope("swiglu_backward");
  check_pair("swiglu_backward", gate, up);
  check_pair("swiglu_backward", grad_out, gate);
  Tensor grad_gate = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  Tensor grad_up = Tensor::empty(up.shape(), up.dtype(), up.device());
  if (!gate.device().is_meta()) {
    swiglu_backward_kernels(gate.device(), grad_gate, grad_up, grad_out.contiguous(), gate.contiguous(),
                            up.contiguous());
  }
  return {grad_gate, grad_up};
}

Tensor geglu(const Tensor& gate, const Tensor& up) {
  const trace::OpScope op_scope("geglu");
  check_pair("geglu", gate, up);
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  if (!out.device().is_meta()) geglu_kernels(out.device(), out, gate.contiguous(), up.contiguous());
  return out;
}

std::pair<Tensor, Tensor> geglu_backward(const Tensor& grad_out, const Tensor& gate, const Tensor& up) {
  const trace::OpScope op_scope("geglu_backward");
  check_pair("geglu_backward", gate, up);
  check_pair("geglu_backward", grad_out, gate);
  Tensor grad_gate = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  Tensor grad_up = Tensor::empty(up.shape(), up.dtype(), up.device());
  if (!gate.device().is_meta()) {
    geglu_backward_kernels(gate.device(), grad_gate, grad_up, grad_out.contiguous(), gate.contiguous(),
                           up.contiguous());
  }
  return {grad_gate, grad_up};
}

Tensor clamped_swiglu(const Tensor& gate, const Tensor& up, float alpha, float limit) {
  const trace::OpScope op_scope("clamped_swiglu");
  check_pair("clamped_swiglu", gate, up);
  TITAN_CHECK(limit > 0.0f && std::isfinite(limit) && std::isfinite(alpha),
              "clamped_swiglu: limit must be finite and > 0 and alpha finite, got limit {}, alpha {}", limit, alpha);
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  if (!out.device().is_meta()) {
    clamped_swiglu_kernels(out.device(), out, gate.contiguous(), up.contiguous(), alpha, limit);
  }
  return out;
}

std::pair<Tensor, Tensor> clamped_swiglu_backward(const Tensor& grad_out, const Tensor& gate, const Tensor& up,
                                                  float alpha, float limit) {
  const trace::OpScope op_scope("clamped_swiglu_backward");
  check_pair("clamped_swiglu_backward", gate, up);
  check_pair("clamped_swiglu_backward", grad_out, gate);
  Tensor grad_gate = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  Tensor grad_up = Tensor::empty(up.shape(), up.dtype(), up.device());
  if (!gate.device().is_meta()) {
    clamped_swiglu_backward_kernels(gate.device(), grad_gate, grad_up, grad_out.contiguous(), gate.contiguous(),
                                    up.contiguous(), alpha, limit);
  }
  return {grad_gate, grad_up};
}

Tensor soft_cap(const Tensor& x, float cap) {
  const trace::OpScope op_scope("soft_cap");
  check_defined("soft_cap", x, "input");
  TITAN_CHECK(cap > 0.0f && std::isfinite(cap), "soft_cap: cap must be finite and > 0, got {}", cap);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!out.device().is_meta()) soft_cap_kernels(out.device(), out, x.contiguous(), cap);
  return out;
}

Tensor soft_cap_backward(const Tensor& grad_out, const Tensor& y, float cap) {
  const trace::OpScope op_scope("soft_cap_backward");
  check_pair("soft_cap_backward", grad_out, y);
  TITAN_CHECK(cap > 0.0f && std::isfinite(cap), "soft_cap_backward: cap must be finite and > 0, got {}", cap);
  Tensor grad_x = Tensor::empty(y.shape(), y.dtype(), y.device());
  if (!grad_x.device().is_meta()) {
    soft_cap_backward_kernels(y.device(), grad_x, grad_out.contiguous(), y.contiguous(), cap);
  }
  return grad_x;
}

}  // namespace titan::ops
