// Block and grid sizes that several CUDA kernel files launch with, and the
// index helpers of their grid-stride loops. Each is defined once here so that
// the kernel files also compile together in one translation unit (the CUDA
// batches of src/titan/CMakeLists.txt); a size one file alone uses stays in
// that file, under a name no other file uses. grid_for is in device_math.cuh.
// Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/ops/cuda/device_math.cuh"

namespace titan::ops::cuda {

// Threads per block of the kernels with no size of their own: grid-stride
// loops over elements, and one block per row where rows are grid-strided.
inline constexpr int kThreads = 256;
// Threads of the one-block kernels that finish a reduction by combining its
// per-row or per-tile partials.
inline constexpr int kFinishThreads = 1024;

// A grid-stride loop: for (int64_t i = first_index(); i < n; i += grid_stride()).
__device__ __forceinline__ int64_t first_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Enough threads for a row of `units`, a whole number of warps, at least one
// warp and at most kThreads.
inline int threads_for(int64_t units) {
  const int64_t warps = (units + kWarpSize - 1) / kWarpSize;
  return warps >= kThreads / kWarpSize ? kThreads : static_cast<int>(warps < 1 ? 1 : warps) * kWarpSize;
}

// Blocks of the grid-stride loops over tokens (one block per token, or per
// run of equal ids): at least one, at most kMaxRowBlocks.
inline constexpr int64_t kMaxRowBlocks = 8192;
inline unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows < kMaxRowBlocks ? rows : kMaxRowBlocks));
}

// softmax and RMSNorm: one block normalises one row, rows grid-strided. More
// threads (up to kMaxNormThreads) and blocks (up to kMaxNormBlocks) than the
// helpers above, and no floor of one: 0 columns give 0 threads and 0 rows 0
// blocks, so the launchers launch nothing for an empty tensor.
inline constexpr int kMaxNormThreads = 512;
inline constexpr int64_t kMaxNormBlocks = 1 << 20;
inline int norm_threads(int64_t cols) {
  const int64_t warps = (cols + kWarpSize - 1) / kWarpSize;
  return static_cast<int>(warps * kWarpSize < kMaxNormThreads ? warps * kWarpSize : kMaxNormThreads);
}
inline unsigned norm_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxNormBlocks ? rows : kMaxNormBlocks);
}

}  // namespace titan::ops::cuda
