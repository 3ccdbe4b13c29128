// CUDA random fill. The value of an element is a function of (seed, block,
// lane) only, computed in double exactly as the CPU's random_value: the affine
// steps use __dadd_rn/__dmul_rn so nvcc cannot fuse them into an FMA (the host
// code is not fused), and the bounds of the truncated normal's CDF come from
// the host. What remains device-specific is the last-bit rounding of log, sin,
// cos, erfc and exp in double, which moves the f32 result only when a value
// lies within a few double ulps of an f32 rounding boundary (~1e-8 per element).
#include "titan/core/random_math.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/random_kernels.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ double sample(const RandomParams& params, const Philox4x32& block, int lane) {
  switch (params.distribution) {
    case RandomDistribution::uniform:
      return __dadd_rn(params.a, __dmul_rn(params.b - params.a, philox_uniform(block.x[lane])));
    case RandomDistribution::normal:
      return __dadd_rn(params.a, __dmul_rn(params.b, philox_normal(block, lane)));
    case RandomDistribution::truncated_normal: {
      const double p =
          __dadd_rn(params.cdf_low, __dmul_rn(params.cdf_high - params.cdf_low, philox_uniform(block.x[lane])));
      const double value = __dadd_rn(params.a, __dmul_rn(params.b, normal_quantile(p)));
      // std::clamp(value, low, high)
      return value < params.low ? params.low : (params.high < value ? params.high : value);
    }
  }
  return 0.0;
}

// bf16 through f32, as the CPU's store_element (never a NaN here, so the
// hardware rounding equals the CPU's bit-level one).
__device__ __forceinline__ void store_double(float* out, int64_t i, double v) { out[i] = static_cast<float>(v); }
__device__ __forceinline__ void store_double(__nv_bfloat16* out, int64_t i, double v) {
  out[i] = __float2bfloat16_rn(static_cast<float>(v));
}

// One Philox block (four elements) per thread iteration: its 10 rounds are
// computed once for the four lanes, and the four stores are adjacent.
template <typename T>
__global__ void random_fill(T* __restrict__ out, int64_t n, RandomParams params) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Philox4x32 bits = philox4x32_10(params.first_block + static_cast<uint64_t>(b), 0, params.seed);
    for (int lane = 0; lane < 4 && 4 * b + lane < n; ++lane)
      store_double(out, 4 * b + lane, sample(params, bits, lane));
  }
}

}  // namespace

cudaError_t launch_random(DType dtype, void* out, int64_t n, const RandomParams& params, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid = grid_for((n + 3) / 4, kThreads);
  if (dtype == DType::bf16) {
    random_fill<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), n, params);
  } else {
    random_fill<<<grid, kThreads, 0, stream>>>(static_cast<float*>(out), n, params);
  }
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
