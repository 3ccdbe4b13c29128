// CUDA log-sum-exp merge of one attention piece into the running result
// (ops/attention.h: attention_merge_): out_acc [B, S, H, D] f32 and lse_acc
// [B, H, S] f32 updated in place from a piece out [B, S, H, D] (f32 or bf16)
// and its lse [B, H, S]; ops/attention.cpp has checked shapes and made the
// piece contiguous.
//
// The same arithmetic as the CPU kernel (ops/cpu/kernels/attention_merge.cpp):
// one thread per (row, head) computes the two weights once, then walks the
// head's D values (consecutive threads take consecutive heads of a row).
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
__global__ void attention_merge(float* __restrict__ out_acc, float* __restrict__ lse_acc, const T* __restrict__ out,
                                const float* __restrict__ lse, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  const int64_t items = batch * seq * heads;
  for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = item % heads, row = item / heads;  // row = b * seq + i
    const int64_t b = row / seq, i = row % seq;
    const int64_t stat = (b * heads + h) * seq + i;
    const float old_lse = lse_acc[stat], new_lse = lse[stat];
    if (new_lse == -INFINITY) continue;  // the piece saw no key
    const float m = fmaxf(old_lse, new_lse);
    const float keep = expf(old_lse - m), take = expf(new_lse - m);
    const float total = keep + take;
    const float keep_share = keep / total, take_share = take / total;
    float* o = out_acc + item * dim;
    const int64_t piece = item * dim;
    for (int64_t d = 0; d < dim; ++d) o[d] = keep_share * o[d] + take_share * load_f32(out, piece + d);
    lse_acc[stat] = m + logf(total);
  }
}

cudaError_t launch_attention_merge(DType piece_dtype, float* out_acc, float* lse_acc, const void* out, const float* lse,
                                   int64_t batch, int64_t seq, int64_t heads, int64_t dim, cudaStream_t stream) {
  const int64_t items = batch * seq * heads;
  if (items == 0) return cudaSuccess;
  if (piece_dtype == DType::bf16) {
    attention_merge<<<grid_for(items, kThreads), kThreads, 0, stream>>>(
        out_acc, lse_acc, static_cast<const __nv_bfloat16*>(out), lse, batch, seq, heads, dim);
  } else {
    attention_merge<<<grid_for(items, kThreads), kThreads, 0, stream>>>(
        out_acc, lse_acc, static_cast<const float*>(out), lse, batch, seq, heads, dim);
  }
  return cudaGetLastError();
}

void attention_merge_kernel(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out, const Tensor& lse) {
  if (out.dtype() != DType::f32 && out.dtype() != DType::bf16)
    unsupported_dtype("attention_merge_", out.device(), out.dtype());
  TITAN_CUDA_CHECK(launch_attention_merge(out.dtype(), out_acc.data<float>(), lse_acc.data<float>(), out.data_ptr(),
                                          lse.data<float>(), out.size(0), out.size(1), out.size(2), out.size(3),
                                          current_stream()));
}

}  // namespace

void register_attention_merge() { attention_merge_kernels.set_kernel(DeviceType::cuda, attention_merge_kernel); }

}  // namespace titan::ops::cuda
