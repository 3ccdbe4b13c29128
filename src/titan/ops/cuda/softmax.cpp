// CUDA softmax over the last dimension: shape maths and launches. The entry
// points in ops/softmax.cpp pass contiguous tensors of one dtype.
#include "titan/ops/softmax.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/softmax_kernels.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

// A 0-d tensor is one row of one element, as on the CPU.
int64_t row_length(const Tensor& t) { return t.dim() == 0 ? 1 : t.size(-1); }

void softmax_kernel(const Tensor& y, const Tensor& x) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16) unsupported_dtype("softmax", x.device(), x.dtype());
  const int64_t cols = row_length(x);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  TITAN_CUDA_CHECK(launch_softmax(x.dtype(), y.data_ptr(), x.data_ptr(), rows, cols, current_stream()));
}

void softmax_backward_kernel(const Tensor& grad_x, const Tensor& grad_y, const Tensor& y) {
  if (y.dtype() != DType::f32 && y.dtype() != DType::bf16) unsupported_dtype("softmax_backward", y.device(), y.dtype());
  const int64_t cols = row_length(y);
  const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
  TITAN_CUDA_CHECK(launch_softmax_backward(y.dtype(), grad_x.data_ptr(), grad_y.data_ptr(), y.data_ptr(), rows, cols,
                                           current_stream()));
}

}  // namespace

void register_softmax() {
  softmax_kernels.set_kernel(DeviceType::cuda, softmax_kernel);
  softmax_backward_kernels.set_kernel(DeviceType::cuda, softmax_backward_kernel);
}

}  // namespace titan::ops::cuda
