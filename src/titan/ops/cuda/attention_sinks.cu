// CUDA attention sinks (ops/attention.h: attention_fold_sinks_ and
// attention_sinks_backward), the same arithmetic as the CPU kernels
// (ops/cpu/kernels/attention_sinks.cpp): the fold takes one thread per
// (row, head), consecutive threads on consecutive heads of a row, like
// attention_merge; the sinks' gradient one block per head, whose threads
// stride over the rows and sum in f64 in a fixed order (run-to-run identical).
// ops/attention.cpp has checked shapes and made every tensor contiguous.
#include <cuda_bf16.h>

#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/attention.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

template <typename T>
__global__ void attention_fold_sinks(T* __restrict__ out, float* __restrict__ lse, const float* __restrict__ sinks,
                                     int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  const int64_t items = batch * seq * heads;
  for (int64_t item = first_index(); item < items; item += grid_stride()) {
    const int64_t h = item % heads, row = item / heads;  // row = b * seq + i
    const int64_t b = row / seq, i = row % seq;
    const int64_t stat = (b * heads + h) * seq + i;
    const float row_lse = lse[stat], sink = sinks[h];
    const float m = fmaxf(row_lse, sink);
    if (m == -INFINITY) continue;  // no key and a -inf sink: nothing to fold
    const float folded = m + logf(expf(row_lse - m) + expf(sink - m));
    const float shrink = expf(row_lse - folded);  // 0 for a row with no visible key
    lse[stat] = folded;
    const int64_t first = item * dim;
    for (int64_t d = 0; d < dim; ++d) store_f32(out, first + d, shrink * load_f32(out, first + d));
  }
}

template <typename T>
__global__ void attention_sinks_backward(float* __restrict__ grad_sinks, const T* __restrict__ grad_out,
                                         const T* __restrict__ out, const float* __restrict__ lse,
                                         const float* __restrict__ sinks, int64_t rows, int64_t seq, int64_t heads,
                                         int64_t dim) {
  __shared__ double scratch[kWarpSize];
  const int64_t h = blockIdx.x;
  double total = 0.0;
  for (int64_t row = threadIdx.x; row < rows; row += blockDim.x) {
    const int64_t b = row / seq, i = row % seq;
    const float row_lse = lse[(b * heads + h) * seq + i];
    if (row_lse == -INFINITY) continue;  // neither key nor sink: no weight
    const float p_sink = expf(sinks[h] - row_lse);
    const int64_t first = (row * heads + h) * dim;
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dot += load_f32(out, first + d) * load_f32(grad_out, first + d);
    total += static_cast<double>(p_sink) * static_cast<double>(dot);
  }
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) grad_sinks[h] = static_cast<float>(-total);
}

void attention_fold_sinks_kernel(const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  const int64_t batch = out.size(0), seq = out.size(1), heads = out.size(2), dim = out.size(3);
  const int64_t items = batch * seq * heads;
  if (items == 0) return;
  const unsigned int grid = grid_for(items, kThreads);
  if (out.dtype() == DType::bf16) {
    attention_fold_sinks<<<grid, kThreads, 0, current_stream()>>>(
        static_cast<__nv_bfloat16*>(out.data_ptr()), lse.data<float>(), sinks.data<float>(), batch, seq, heads, dim);
  } else if (out.dtype() == DType::f32) {
    attention_fold_sinks<<<grid, kThreads, 0, current_stream()>>>(out.data<float>(), lse.data<float>(),
                                                                  sinks.data<float>(), batch, seq, heads, dim);
  } else {
    unsupported_dtype("attention_fold_sinks_", out.device(), out.dtype());
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void attention_sinks_backward_kernel(const Tensor& grad_sinks, const Tensor& grad_out, const Tensor& out,
                                     const Tensor& lse, const Tensor& sinks) {
  const int64_t seq = out.size(1), heads = out.size(2), dim = out.size(3), rows = out.size(0) * seq;
  if (heads == 0) return;
  const auto grid = static_cast<unsigned int>(heads);
  if (out.dtype() == DType::bf16) {
    attention_sinks_backward<<<grid, kThreads, 0, current_stream()>>>(
        grad_sinks.data<float>(), static_cast<const __nv_bfloat16*>(grad_out.data_ptr()),
        static_cast<const __nv_bfloat16*>(out.data_ptr()), lse.data<float>(), sinks.data<float>(), rows, seq, heads,
        dim);
  } else if (out.dtype() == DType::f32) {
    attention_sinks_backward<<<grid, kThreads, 0, current_stream()>>>(grad_sinks.data<float>(), grad_out.data<float>(),
                                                                      out.data<float>(), lse.data<float>(),
                                                                      sinks.data<float>(), rows, seq, heads, dim);
  } else {
    unsupported_dtype("attention_sinks_backward", out.device(), out.dtype());
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void register_attention_sinks() {
  attention_fold_sinks_kernels.set_kernel(DeviceType::cuda, attention_fold_sinks_kernel);
  attention_sinks_backward_kernels.set_kernel(DeviceType::cuda, attention_sinks_backward_kernel);
}

}  // namespace titan::ops::cuda
