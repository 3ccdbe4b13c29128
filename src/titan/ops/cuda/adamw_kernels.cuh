// Launcher for the CUDA multi-tensor fused AdamW. Plain pointers and sizes
// only; the Tensor plumbing lives in adamw.cpp.
//
// Every tensor is cut into chunks of kAdamWChunk elements; one launch runs one
// block per chunk of every tensor, each block finding its tensor in a device
// array of AdamWTensor (so thousands of small tensors cost one launch, and a
// few large ones still spread over the whole GPU).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

inline constexpr int64_t kAdamWChunk = 16384;
inline int64_t adamw_chunks(int64_t n) { return (n + kAdamWChunk - 1) / kAdamWChunk; }

// One non-empty tensor: its chunks are [first_block, first_block + adamw_chunks(numel)).
struct AdamWTensor {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t numel;
  int64_t first_block;
  int32_t param_bf16;
  int32_t grad_bf16;
  int32_t state_bf16;  // both moments
};

// The per-step constants, derived on the host as the CPU kernel derives them.
struct AdamWConstants {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float decay;           // 1 - lr * weight_decay
  float step_size;       // lr / (1 - beta1^step)
  float inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^step)
};

// `host_tensors` (count entries, ordered by first_block) is uploaded into
// `device_tensors`; `chunks` is the total. `step_scalars` (device memory,
// may be null) overrides decay, step_size and inv_sqrt_bias2, in that order.
cudaError_t launch_adamw(const AdamWTensor* host_tensors, AdamWTensor* device_tensors, int count, int64_t chunks,
                         const AdamWConstants& constants, const float* step_scalars, cudaStream_t stream);

}  // namespace titan::ops::cuda
