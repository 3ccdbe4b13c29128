// CUDA attention-mask bias [B, Sq, Sk] f32 (0 visible, -inf hidden): what the
// naive reference attention adds to its scores, written from the mask's
// definition in ops/attention.h as the CPU one. The entry point has checked
// shapes and made document_ids contiguous.
//
// One thread per output element: consecutive threads take consecutive keys,
// so stores are coalesced.
#include <cstdint>

#include "titan/core/tensor.h"
#include "titan/ops/attention.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

struct MaskBiasShape {
  int64_t batch = 0, q_len = 0, k_len = 0;
};

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

// document_ids: [B, Sk] of `document_id_bytes` (4: i32, 8: i64) per entry, or null.
cudaError_t launch_mask_bias(float* bias, const MaskBiasShape& shape, bool causal, int64_t sliding_window,
                             const void* document_ids, int document_id_bytes, cudaStream_t stream) {
  const int64_t n = shape.batch * shape.q_len * shape.k_len;
  if (n == 0) return cudaSuccess;
  mask_bias<<<grid_for(n, kThreads), kThreads, 0, stream>>>(bias, shape, causal, sliding_window, document_ids,
                                                            document_id_bytes);
  return cudaGetLastError();
}

void mask_bias_kernel(const Tensor& bias, const AttentionMask& mask) {
  if (bias.dtype() != DType::f32) unsupported_dtype("attention_mask_bias", bias.device(), bias.dtype());
  TITAN_CHECK(mask.default_layout(),
              "attention_mask_bias: query_start/key_start/query_document_ids are not supported on CUDA yet");
  const Tensor& docs = mask.document_ids;
  if (docs.defined()) {
    if (docs.dtype() != DType::i32 && docs.dtype() != DType::i64) {
      unsupported_dtype("attention_mask_bias (document_ids)", docs.device(), docs.dtype());
    }
    TITAN_CHECK(docs.device() == bias.device() && docs.is_contiguous(),
                "attention_mask_bias: document_ids must be contiguous on {}, got a tensor on {}", bias.device().str(),
                docs.device().str());
  }
  MaskBiasShape shape;
  shape.batch = bias.size(0);
  shape.q_len = bias.size(1);
  shape.k_len = bias.size(2);
  TITAN_CUDA_CHECK(launch_mask_bias(static_cast<float*>(bias.data_ptr()), shape, mask.causal, mask.sliding_window,
                                    docs.defined() ? docs.data_ptr() : nullptr,
                                    docs.defined() ? static_cast<int>(docs.element_size()) : 0, current_stream()));
}

}  // namespace

void register_attention_mask() { mask_bias_kernels.set_kernel(DeviceType::cuda, mask_bias_kernel); }

}  // namespace titan::ops::cuda
