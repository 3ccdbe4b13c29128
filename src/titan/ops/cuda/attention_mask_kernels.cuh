// Launcher for the CUDA attention-mask bias [B, Sq, Sk] f32 (0 visible, -inf
// hidden), written from the mask's definition in ops/attention.h as the CPU one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

struct MaskBiasShape {
  int64_t batch = 0, q_len = 0, k_len = 0;
};

// document_ids: [B, Sk] of `document_id_bytes` (4: i32, 8: i64) per entry, or null.
cudaError_t launch_mask_bias(float* bias, const MaskBiasShape& shape, bool causal, int64_t sliding_window,
                             const void* document_ids, int document_id_bytes, cudaStream_t stream);

}  // namespace titan::ops::cuda
