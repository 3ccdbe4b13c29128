// Device-side helpers shared by the CUDA kernels: bf16 <-> f32 loads and
// stores (all math in f32, one rounding on store), warp and block reductions,
// the logit soft cap, and grid sizing (more in launch_shape.cuh). Included by
// .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <mutex>

namespace titan::ops::cuda {

inline constexpr int kWarpSize = 32;

__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store_f32(float* p, int64_t i, float v) { p[i] = v; }
// Round to nearest even, as the CPU backend's bf16 conversion.
__device__ __forceinline__ void store_f32(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// A soft-capped logit: cap * tanh(x / cap) when cap > 0, else x. tanhf is
// accurate to a few ulp; the CPU's exp-based tanh differs from it by about
// cap * 1e-7, far below what a loss can resolve.
__device__ __forceinline__ float capped(float x, float cap) { return cap > 0.0f ? cap * tanhf(x / cap) : x; }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
// max that keeps NaN, as torch.max and the CPU kernels do (fmaxf returns the other operand).
__device__ __forceinline__ float nan_max(float a, float b) { return a != a ? a : (b != b ? b : fmaxf(a, b)); }

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. `scratch` holds 32 floats of shared memory. The order of
// additions is fixed by the block shape, so results are run-to-run identical.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarpSize;
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarpSize;
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, no more.
inline unsigned int grid_for(int64_t n, int block, int max_blocks = 65535) {
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

// Double-precision block sum, for combining per-block partials (the final
// pass of the deterministic reductions). `scratch` holds 32 doubles of shared
// memory; every thread gets the result, in an order fixed by the block shape.
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double block_sum(double v, double* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarpSize;
  v = lane < warps ? scratch[lane] : 0.0;
  return warp_sum(v);
}

// Multi-tensor kernels run one block per tile of every tensor; `items` (one
// per non-empty tensor, ordered by their `first_block` field) says where each
// tensor's tiles start. Returns the index of the item owning `block`.
template <typename Item>
__device__ __forceinline__ int owner_of_block(const Item* items, int count, int64_t block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (items[mid].first_block <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Host side, for multi-tensor launchers: copies `bytes` of host metadata to
// device memory `dst` on `stream` through one process-wide pinned buffer, so
// the caller's host array may die as soon as this returns. The buffer is
// refilled only once its previous copy has run (an event): no device-wide
// synchronisation, at most a wait for the previous upload.
inline cudaError_t upload_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  static std::mutex mutex;
  static void* pinned = nullptr;  // never freed: it lives as long as the process
  static size_t capacity = 0;
  static cudaEvent_t copied = nullptr;
  if (bytes == 0) return cudaSuccess;
  const std::lock_guard<std::mutex> lock(mutex);
  cudaError_t status = cudaSuccess;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if ((status = cudaStreamIsCapturing(stream, &capture)) != cudaSuccess) return status;
  if (capture == cudaStreamCaptureStatusActive) {
    // A recorded copy reads its source at every replay: give it pinned memory
    // of its own that is never rewritten (nor freed: a graph is recorded once).
    void* frozen = nullptr;
    if ((status = cudaMallocHost(&frozen, bytes)) != cudaSuccess) return status;
    std::memcpy(frozen, src, bytes);
    return cudaMemcpyAsync(dst, frozen, bytes, cudaMemcpyHostToDevice, stream);
  }
  if (copied == nullptr && (status = cudaEventCreateWithFlags(&copied, cudaEventDisableTiming)) != cudaSuccess) {
    return status;
  }
  if ((status = cudaEventSynchronize(copied)) != cudaSuccess) return status;
  if (bytes > capacity) {
    if (pinned != nullptr && (status = cudaFreeHost(pinned)) != cudaSuccess) return status;
    pinned = nullptr;
    capacity = 0;
    if ((status = cudaMallocHost(&pinned, bytes)) != cudaSuccess) return status;
    capacity = bytes;
  }
  std::memcpy(pinned, src, bytes);
  if ((status = cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, stream)) != cudaSuccess) return status;
  return cudaEventRecord(copied, stream);
}

}  // namespace titan::ops::cuda
