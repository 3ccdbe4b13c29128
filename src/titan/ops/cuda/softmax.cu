// CUDA softmax over the last dimension of a contiguous [rows, cols] tensor
// (f32 or bf16), forward and backward: kernels, launchers, Tensor plumbing and
// registration. The entry points in ops/softmax.cpp pass contiguous tensors.
//
// One block per row (rows grid-strided), each thread striding over the
// columns; max and sum are block reductions in a fixed order, so results are
// run-to-run identical. Three passes over the row (max, sum, write) re-read x
// from cache instead of holding it in shared memory, which keeps the kernel
// independent of the row length.
#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/softmax.h"

namespace titan::ops::cuda {
namespace {

template <typename T>
__global__ void softmax_forward(T* __restrict__ y, const T* __restrict__ x, int64_t rows, int64_t cols) {
  __shared__ float scratch[kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    // fmaxf ignores NaN, like the CPU's compare-select.
    float row_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) row_max = fmaxf(row_max, load_f32(xr, c));
    row_max = block_max(row_max, scratch);
    if (row_max == -INFINITY) {  // fully masked: zeros, not NaN
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store_f32(yr, c, 0.0f);
      continue;
    }
    float total = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) total += expf(load_f32(xr, c) - row_max);
    const float inverse = 1.0f / block_sum(total, scratch);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      store_f32(yr, c, expf(load_f32(xr, c) - row_max) * inverse);
  }
}

template <typename T>
__global__ void softmax_backward(T* __restrict__ grad_x, const T* __restrict__ grad_y, const T* __restrict__ y,
                                 int64_t rows, int64_t cols) {
  __shared__ float scratch[kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dot += load_f32(grad_y, base + c) * load_f32(y, base + c);
    dot = block_sum(dot, scratch);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      store_f32(grad_x, base + c, load_f32(y, base + c) * (load_f32(grad_y, base + c) - dot));
    }
  }
}

// A row whose entries are all -inf becomes zeros, as on the CPU.
cudaError_t launch_softmax(DType dtype, void* y, const void* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int threads = norm_threads(cols);
  if (dtype == DType::bf16) {
    softmax_forward<<<norm_blocks(rows), threads, 0, stream>>>(static_cast<__nv_bfloat16*>(y),
                                                               static_cast<const __nv_bfloat16*>(x), rows, cols);
  } else {
    softmax_forward<<<norm_blocks(rows), threads, 0, stream>>>(static_cast<float*>(y), static_cast<const float*>(x),
                                                               rows, cols);
  }
  return cudaGetLastError();
}

// grad_x = y * (grad_y - sum(grad_y * y)) row by row.
cudaError_t launch_softmax_backward(DType dtype, void* grad_x, const void* grad_y, const void* y, int64_t rows,
                                    int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int threads = norm_threads(cols);
  if (dtype == DType::bf16) {
    softmax_backward<<<norm_blocks(rows), threads, 0, stream>>>(static_cast<__nv_bfloat16*>(grad_x),
                                                                static_cast<const __nv_bfloat16*>(grad_y),
                                                                static_cast<const __nv_bfloat16*>(y), rows, cols);
  } else {
    softmax_backward<<<norm_blocks(rows), threads, 0, stream>>>(
        static_cast<float*>(grad_x), static_cast<const float*>(grad_y), static_cast<const float*>(y), rows, cols);
  }
  return cudaGetLastError();
}

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
