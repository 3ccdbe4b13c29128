// CUDA RMSNorm: shape maths, scratch for the weight gradient, launches. The
// entry points in ops/rms_norm.cpp pass contiguous x, weight and rstd.
#include "titan/ops/rms_norm.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/rms_norm_kernels.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

void require_float(const char* op, const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16) unsupported_dtype(op, t.device(), t.dtype());
}

void rms_norm_kernel(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, float eps) {
  require_float("rms_norm", x);
  const int64_t dim = x.size(-1);
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  TITAN_CUDA_CHECK(launch_rms_norm(x.dtype(), y.data_ptr(), static_cast<float*>(rstd.data_ptr()), x.data_ptr(),
                                   weight.data_ptr(), eps, rows, dim, current_stream()));
}

void rms_norm_backward_kernel(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_y, const Tensor& x,
                              const Tensor& weight, const Tensor& rstd) {
  require_float("rms_norm_backward", x);
  TITAN_CHECK(rstd.dtype() == DType::f32 && rstd.device() == x.device(),
              "rms_norm_backward: rstd must be f32 on {}, got {} on {}", x.device().str(), dtype_name(rstd.dtype()),
              rstd.device().str());
  const int64_t dim = x.size(-1);
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  TITAN_CHECK(rstd.numel() == rows, "rms_norm_backward: rstd has {} values for {} rows", rstd.numel(), rows);
  // Freed when this returns; the allocator orders reuse after the kernels on this stream.
  Tensor scratch = Tensor::empty({rms_norm_backward_scratch_size(rows, dim)}, DType::f32, x.device());
  TITAN_CUDA_CHECK(launch_rms_norm_backward(x.dtype(), grad_x.data_ptr(), grad_weight.data_ptr(), grad_y.data_ptr(),
                                            x.data_ptr(), weight.data_ptr(), static_cast<const float*>(rstd.data_ptr()),
                                            static_cast<float*>(scratch.data_ptr()), rows, dim, current_stream()));
}

}  // namespace

void register_rms_norm() {
  rms_norm_kernels.set_kernel(DeviceType::cuda, rms_norm_kernel);
  rms_norm_backward_kernels.set_kernel(DeviceType::cuda, rms_norm_backward_kernel);
}

}  // namespace titan::ops::cuda
