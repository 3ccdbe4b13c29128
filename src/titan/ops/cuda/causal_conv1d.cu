// CUDA causal depthwise conv1d + SiLU (ops/causal_conv1d.h), the arithmetic
// of the CPU kernels (ops/cpu/kernels/causal_conv1d.cpp) in f32: the forward
// and the input gradient one thread per (row, token, channel) element,
// consecutive threads on consecutive channels; the weight gradient one block
// per (channel, tap), its threads striding over the tokens and summing in a
// fixed order (run-to-run identical, no atomics). x, weight and the gradients
// are f32 or bf16, each on its own (a flag per tensor); document ids i32 or i64.
#include <cuda_bf16.h>

#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/causal_conv1d.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace causal_conv1d_device {

struct ConvArgs {
  const void* x;
  const void* weight;
  const void* ids;  // null: one document per row
  bool x_bf16, weight_bf16, ids_i64;
  int64_t batch, tokens, channels, width;
};

__device__ __forceinline__ float load(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store(void* p, bool bf16, int64_t i, float v) {
  if (bf16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}
__device__ __forceinline__ int64_t document(const ConvArgs& a, int64_t index) {
  return a.ids_i64 ? static_cast<const int64_t*>(a.ids)[index] : static_cast<const int32_t*>(a.ids)[index];
}
// Whether token src of row b feeds token t (src <= t, within reach and in t's document).
__device__ __forceinline__ bool feeds(const ConvArgs& a, int64_t b, int64_t src, int64_t t) {
  if (src < 0 || src > t || t - src >= a.width) return false;
  return a.ids == nullptr || document(a, b * a.tokens + src) == document(a, b * a.tokens + t);
}

__device__ float pre_activation(const ConvArgs& a, int64_t b, int64_t t, int64_t c) {
  float sum = 0.0f;
  for (int64_t j = 0; j < a.width; ++j) {
    const int64_t src = t - (a.width - 1) + j;
    if (!feeds(a, b, src, t)) continue;
    sum += load(a.weight, a.weight_bf16, c * a.width + j) * load(a.x, a.x_bf16, (b * a.tokens + src) * a.channels + c);
  }
  return sum;
}

__global__ void conv_forward(ConvArgs a, void* y) {
  const int64_t n = a.batch * a.tokens * a.channels;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = i % a.channels, row = i / a.channels, b = row / a.tokens, t = row % a.tokens;
    const float u = pre_activation(a, b, t, c);
    store(y, a.x_bf16, i, u / (1.0f + expf(-u)));
  }
}

// d pre-activation per element, f32 scratch.
__global__ void conv_grad_pre_activation(ConvArgs a, const void* grad_y, float* du) {
  const int64_t n = a.batch * a.tokens * a.channels;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = i % a.channels, row = i / a.channels, b = row / a.tokens, t = row % a.tokens;
    const float u = pre_activation(a, b, t, c), s = 1.0f / (1.0f + expf(-u));
    du[i] = load(grad_y, a.x_bf16, i) * s * (1.0f + u * (1.0f - s));
  }
}

__global__ void conv_grad_x(ConvArgs a, const float* du, void* grad_x) {
  const int64_t n = a.batch * a.tokens * a.channels;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = i % a.channels, row = i / a.channels, b = row / a.tokens, src = row % a.tokens;
    float sum = 0.0f;
    for (int64_t t = src; t < a.tokens && t - src < a.width; ++t) {
      if (!feeds(a, b, src, t)) continue;
      sum += du[(b * a.tokens + t) * a.channels + c] *
             load(a.weight, a.weight_bf16, c * a.width + (src - t + a.width - 1));
    }
    store(grad_x, a.x_bf16, i, sum);
  }
}

// One block per (channel, tap j): sums du[t] x[t - (K - 1) + j] over every row and token.
__global__ void conv_grad_weight(ConvArgs a, const float* du, void* grad_weight, bool grad_weight_bf16) {
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x / a.width, j = blockIdx.x % a.width, rows = a.batch * a.tokens;
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t b = r / a.tokens, t = r % a.tokens, src = t - (a.width - 1) + j;
    if (!feeds(a, b, src, t)) continue;
    sum += static_cast<double>(du[r * a.channels + c]) * load(a.x, a.x_bf16, (b * a.tokens + src) * a.channels + c);
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) store(grad_weight, grad_weight_bf16, blockIdx.x, static_cast<float>(sum));
}

ConvArgs args_of(const Tensor& x, const Tensor& weight, const Tensor& ids) {
  return {x.data_ptr(),
          weight.data_ptr(),
          ids.defined() ? ids.data_ptr() : nullptr,
          x.dtype() == DType::bf16,
          weight.dtype() == DType::bf16,
          ids.defined() && ids.dtype() == DType::i64,
          x.size(0),
          x.size(1),
          x.size(2),
          weight.size(1)};
}

void causal_conv1d_kernel(const Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  const ConvArgs a = args_of(x, weight, document_ids);
  conv_forward<<<grid_for(x.numel(), kThreads), kThreads, 0, current_stream()>>>(a, y.data_ptr());
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void causal_conv1d_backward_kernel(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_y,
                                   const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  const ConvArgs a = args_of(x, weight, document_ids);
  cudaStream_t stream = current_stream();
  // Freed when this returns; the allocator orders reuse after the kernels on this stream.
  Tensor du = Tensor::empty({x.numel()}, DType::f32, x.device());
  if (x.numel() > 0) {
    const unsigned grid = grid_for(x.numel(), kThreads);
    conv_grad_pre_activation<<<grid, kThreads, 0, stream>>>(a, grad_y.data_ptr(), du.data<float>());
    TITAN_CUDA_CHECK(cudaGetLastError());
    conv_grad_x<<<grid, kThreads, 0, stream>>>(a, du.data<float>(), grad_x.data_ptr());
    TITAN_CUDA_CHECK(cudaGetLastError());
  }
  if (weight.numel() > 0) {
    conv_grad_weight<<<static_cast<unsigned>(weight.numel()), kThreads, 0, stream>>>(
        a, du.data<float>(), grad_weight.data_ptr(), grad_weight.dtype() == DType::bf16);
    TITAN_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace causal_conv1d_device

void register_causal_conv1d() {
  causal_conv1d_kernels.set_kernel(DeviceType::cuda, causal_conv1d_device::causal_conv1d_kernel);
  causal_conv1d_backward_kernels.set_kernel(DeviceType::cuda, causal_conv1d_device::causal_conv1d_backward_kernel);
}

}  // namespace titan::ops::cuda
