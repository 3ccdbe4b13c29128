// Launcher for the CUDA attention merge (ops/attention.h: attention_merge_):
// out_acc [B, S, H, D] f32 and lse_acc [B, H, S] f32 updated in place from a
// piece out [B, S, H, D] (f32 or bf16) and its lse [B, H, S]; all contiguous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

cudaError_t launch_attention_merge(DType piece_dtype, float* out_acc, float* lse_acc, const void* out, const float* lse,
                                   int64_t batch, int64_t seq, int64_t heads, int64_t dim, cudaStream_t stream);

}  // namespace titan::ops::cuda
