// Launchers for the CUDA reductions. Plain pointers and sizes only; the Tensor
// plumbing lives in reduction.cpp.
//
// Determinism: like the CPU backend, inputs are cut into tiles of
// kReduceTile elements whose number depends only on the size; each tile is
// reduced by one block in f32 into a double partial, and the partials are
// combined by one block in double in a fixed order. No atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

enum class ReduceKind : int32_t { sum, mean, max, sum_squares };

inline constexpr int64_t kReduceTile = 4096;
inline int64_t reduce_tiles(int64_t n) { return (n + kReduceTile - 1) / kReduceTile; }

// *out (one f32 on the device) = the reduction of x[0, n), x f32 or bf16.
// `partials` is scratch for reduce_tiles(n) doubles.
cudaError_t launch_reduce(ReduceKind kind, float* out, const void* x, bool x_bf16, int64_t n, double* partials,
                          cudaStream_t stream);

// One non-empty tensor of a global norm; its tiles are partials
// [first_block, first_block + reduce_tiles(numel)).
struct NormTensor {
  const void* data;
  int64_t numel;
  int64_t first_block;
  int32_t bf16;
};

// *out = sqrt(sum of squares of every tensor) in one pass over all of them.
// `host_tensors` (count entries, ordered by first_block) is uploaded into
// `device_tensors`; `partials` is scratch for `tiles` doubles (the total).
cudaError_t launch_global_l2_norm(float* out, const NormTensor* host_tensors, NormTensor* device_tensors, int count,
                                  int64_t tiles, double* partials, cudaStream_t stream);

// Sums x (contiguous, shape `sizes`) into out (contiguous), element by element:
// out_strides[d] is x's dim d's stride in out, 0 for a dim summed away (every
// leading dim and every dim out broadcasts from size 1).
inline constexpr int kMaxSumRank = 8;
struct SumToShapeLayout {
  int rank;
  int64_t sizes[kMaxSumRank];
  int64_t out_strides[kMaxSumRank];
};
cudaError_t launch_sum_to_shape(void* out, const void* x, bool bf16, int64_t out_numel, const SumToShapeLayout& layout,
                                cudaStream_t stream);

}  // namespace titan::ops::cuda
