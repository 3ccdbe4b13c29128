// Launcher for the CUDA rotary embedding: x and out [B, S, H, D] contiguous
// (f32 or bf16, checked by rope.cpp), cos and sin [max_positions, D/2] f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

struct RopeShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  int64_t max_positions = 0;
};

// positions: [B, S] of `position_bytes` (4: i32, 8: i64) per entry, or null
// for 0..S-1 in every sequence. A position outside the table cannot be
// reported from the device without a sync, so its token's output is NaN.
// interleaved pairs (2i, 2i+1); otherwise halves (i, i + D/2). inverse rotates by -angle.
cudaError_t launch_rope(DType dtype, void* out, const void* x, const float* cos, const float* sin,
                        const void* positions, int position_bytes, const RopeShape& shape, bool interleaved,
                        bool inverse, cudaStream_t stream);

}  // namespace titan::ops::cuda
