// CUDA attention-mask bias: one thread per output element (consecutive
// threads take consecutive keys, so stores are coalesced).
#include "titan/ops/cuda/attention_mask_kernels.cuh"
#include "titan/ops/cuda/device_math.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t document_of(const void* ids, int bytes, int64_t i) {
  return bytes == 8 ? static_cast<const int64_t*>(ids)[i] : static_cast<const int32_t*>(ids)[i];
}

__global__ void mask_bias(float* __restrict__ bias, MaskBiasShape shape, bool causal, int64_t sliding_window,
                          const void* __restrict__ document_ids, int document_id_bytes) {
  const int64_t n = shape.batch * shape.q_len * shape.k_len;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % shape.k_len;
    const int64_t row = e / shape.k_len;  // b * q_len + i
    const int64_t i = row % shape.q_len;
    const int64_t b = row / shape.q_len;
    const int64_t position = shape.k_len - shape.q_len + i;  // the query's absolute position
    bool visible = true;
    if (causal && j > position) visible = false;
    if (sliding_window > 0 && position - j >= sliding_window) visible = false;
    if (document_ids != nullptr && document_of(document_ids, document_id_bytes, b * shape.k_len + position) !=
                                       document_of(document_ids, document_id_bytes, b * shape.k_len + j)) {
      visible = false;
    }
    bias[e] = visible ? 0.0f : -INFINITY;
  }
}

}  // namespace

cudaError_t launch_mask_bias(float* bias, const MaskBiasShape& shape, bool causal, int64_t sliding_window,
                             const void* document_ids, int document_id_bytes, cudaStream_t stream) {
  const int64_t n = shape.batch * shape.q_len * shape.k_len;
  if (n == 0) return cudaSuccess;
  mask_bias<<<grid_for(n, kThreads), kThreads, 0, stream>>>(bias, shape, causal, sliding_window, document_ids,
                                                            document_id_bytes);
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
