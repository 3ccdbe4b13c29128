// CUDA elementwise ops: dtype checks and launches. The entry points in
// ops/elementwise.cpp have already made the inputs contiguous and checked
// shapes and dtypes; here only the dtypes the kernels implement pass.
#include "titan/ops/elementwise.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/elementwise_kernels.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/grad_clip.h"

namespace titan::ops::cuda {
namespace {

void require_float(const char* op, const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16) unsupported_dtype(op, t.device(), t.dtype());
}

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, float alpha) {
  require_float("binary", out);
  require_float("binary", b);
  const BinaryKind kind = op == BinaryOp::add   ? BinaryKind::add
                          : op == BinaryOp::sub ? BinaryKind::sub
                                                : BinaryKind::mul;
  TITAN_CUDA_CHECK(launch_binary(kind, out.dtype(), b.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(), alpha,
                                 out.numel(), current_stream()));
}

void scale_kernel(const Tensor& out, const Tensor& a, float factor) {
  require_float("scale", out);
  TITAN_CUDA_CHECK(
      launch_scale(out.dtype(), out.data_ptr(), a.data_ptr(), factor, nullptr, out.numel(), current_stream()));
}

void scale_by_kernel(const Tensor& out, const Tensor& x, const Tensor& factors, int64_t index) {
  require_float("scale_by", out);
  TITAN_CUDA_CHECK(launch_scale(out.dtype(), out.data_ptr(), x.data_ptr(), 0.0f, factors.data<float>() + index,
                                out.numel(), current_stream()));
}

void clip_scalars_kernel(const Tensor& out, const Tensor& sum_squares, double max_norm) {
  TITAN_CUDA_CHECK(launch_clip_scalars(out.data<float>(), sum_squares.data<float>(), max_norm, current_stream()));
}

void silu_kernel(const Tensor& out, const Tensor& x) {
  require_float("silu", out);
  TITAN_CUDA_CHECK(launch_silu(out.dtype(), out.data_ptr(), x.data_ptr(), out.numel(), current_stream()));
}

void silu_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x) {
  require_float("silu_backward", grad_x);
  TITAN_CUDA_CHECK(launch_silu_backward(grad_x.dtype(), grad_x.data_ptr(), grad_out.data_ptr(), x.data_ptr(),
                                        grad_x.numel(), current_stream()));
}

void swiglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up) {
  require_float("swiglu", out);
  TITAN_CUDA_CHECK(
      launch_swiglu(out.dtype(), out.data_ptr(), gate.data_ptr(), up.data_ptr(), out.numel(), current_stream()));
}

void swiglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out, const Tensor& gate,
                            const Tensor& up) {
  require_float("swiglu_backward", grad_gate);
  TITAN_CUDA_CHECK(launch_swiglu_backward(grad_gate.dtype(), grad_gate.data_ptr(), grad_up.data_ptr(),
                                          grad_out.data_ptr(), gate.data_ptr(), up.data_ptr(), grad_gate.numel(),
                                          current_stream()));
}

void geglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up) {
  require_float("geglu", out);
  TITAN_CUDA_CHECK(
      launch_geglu(out.dtype(), out.data_ptr(), gate.data_ptr(), up.data_ptr(), out.numel(), current_stream()));
}

void geglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out, const Tensor& gate,
                           const Tensor& up) {
  require_float("geglu_backward", grad_gate);
  TITAN_CUDA_CHECK(launch_geglu_backward(grad_gate.dtype(), grad_gate.data_ptr(), grad_up.data_ptr(),
                                         grad_out.data_ptr(), gate.data_ptr(), up.data_ptr(), grad_gate.numel(),
                                         current_stream()));
}

void soft_cap_kernel(const Tensor& out, const Tensor& x, float cap) {
  require_float("soft_cap", out);
  TITAN_CUDA_CHECK(launch_soft_cap(out.dtype(), out.data_ptr(), x.data_ptr(), cap, out.numel(), current_stream()));
}

void soft_cap_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, float cap) {
  require_float("soft_cap_backward", grad_x);
  TITAN_CUDA_CHECK(launch_soft_cap_backward(grad_x.dtype(), grad_x.data_ptr(), grad_out.data_ptr(), y.data_ptr(), cap,
                                            grad_x.numel(), current_stream()));
}

}  // namespace

void register_elementwise() {
  binary_kernels.set_kernel(DeviceType::cuda, binary_kernel);
  scale_kernels.set_kernel(DeviceType::cuda, scale_kernel);
  scale_by_kernels.set_kernel(DeviceType::cuda, scale_by_kernel);
  clip_scalars_kernels.set_kernel(DeviceType::cuda, clip_scalars_kernel);
  silu_kernels.set_kernel(DeviceType::cuda, silu_kernel);
  silu_backward_kernels.set_kernel(DeviceType::cuda, silu_backward_kernel);
  swiglu_kernels.set_kernel(DeviceType::cuda, swiglu_kernel);
  swiglu_backward_kernels.set_kernel(DeviceType::cuda, swiglu_backward_kernel);
  geglu_kernels.set_kernel(DeviceType::cuda, geglu_kernel);
  geglu_backward_kernels.set_kernel(DeviceType::cuda, geglu_backward_kernel);
  soft_cap_kernels.set_kernel(DeviceType::cuda, soft_cap_kernel);
  soft_cap_backward_kernels.set_kernel(DeviceType::cuda, soft_cap_backward_kernel);
}

}  // namespace titan::ops::cuda
