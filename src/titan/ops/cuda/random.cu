// CUDA random fill: the same Philox numbers and distribution math as the CPU
// (ops/random.cpp's random_value), one thread per Philox block, so a seed gives
// the CPU's values. f32 and bf16 are written directly; the other float formats
// are drawn in f32 and converted by the copy kernel (launch_convert,
// ops/cuda/convert.cuh), which is exactly the CPU's double -> f32 -> format
// rounding.
//
// The value of an element is a function of (seed, block, lane) only, computed
// in double exactly as the CPU's random_value: the affine steps use
// __dadd_rn/__dmul_rn so nvcc cannot fuse them into an FMA (the host code is
// not fused), and the bounds of the truncated normal's CDF come from the host.
// What remains device-specific is the last-bit rounding of log, sin, cos, erfc
// and exp in double, which moves the f32 result only when a value lies within
// a few double ulps of an f32 rounding boundary (~1e-8 per element).
#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/random_math.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/convert.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/random.h"

namespace titan::ops::cuda {
namespace {

enum class RandomDistribution { uniform, normal, truncated_normal };

struct RandomParams {
  RandomDistribution distribution = RandomDistribution::uniform;
  double a = 0.0, b = 1.0;               // uniform: [a, b); normal and truncated: mean a, std b
  double low = 0.0, high = 0.0;          // truncated: the bounds
  double cdf_low = 0.0, cdf_high = 0.0;  // truncated: normal_cdf((low - a) / b), ((high - a) / b), from the host
  uint64_t seed = 0;
  uint64_t first_block = 0;
  uint64_t stream = 0;
  RandomBox box;  // dims 0: the tensor is the whole
};

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
    const Philox4x32 bits = philox4x32_10(params.first_block + static_cast<uint64_t>(b), params.stream, params.seed);
    for (int lane = 0; lane < 4 && 4 * b + lane < n; ++lane)
      store_double(out, 4 * b + lane, sample(params, bits, lane));
  }
}

// A shard of a whole tensor: its neighbours in the whole may lie in other
// shards, so each element computes the block of its whole index on its own.
template <typename T>
__global__ void random_fill_box(T* __restrict__ out, int64_t n, RandomParams params) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t whole = whole_index(params.box, static_cast<uint64_t>(i));
    const Philox4x32 bits = philox4x32_10(params.first_block + whole / 4, params.stream, params.seed);
    store_double(out, i, sample(params, bits, static_cast<int>(whole % 4)));
  }
}

template <typename T>
void launch_random_as(T* out, int64_t n, const RandomParams& params, cudaStream_t stream) {
  if (params.box.dims == 0) {
    random_fill<<<grid_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(out, n, params);
  } else {
    random_fill_box<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, n, params);
  }
}

// Fills n contiguous elements of `dtype` (f32 or bf16): element i takes lane
// w % 4 of Philox block first_block + w / 4 (w: its index in the whole
// tensor), rounded once from double.
cudaError_t launch_random(DType dtype, void* out, int64_t n, const RandomParams& params, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (dtype == DType::bf16) {
    launch_random_as(static_cast<__nv_bfloat16*>(out), n, params, stream);
  } else {
    launch_random_as(static_cast<float*>(out), n, params, stream);
  }
  return cudaGetLastError();
}

RandomParams params_for(const RandomSpec& spec) {
  RandomParams params;
  params.a = spec.a;
  params.b = spec.b;
  params.low = spec.low;
  params.high = spec.high;
  params.seed = spec.seed;
  params.first_block = spec.first_block;
  params.stream = spec.stream;
  params.box = spec.box;
  switch (spec.distribution) {
    case Distribution::uniform:
      params.distribution = RandomDistribution::uniform;
      break;
    case Distribution::normal:
      params.distribution = RandomDistribution::normal;
      break;
    case Distribution::truncated_normal:
      params.distribution = RandomDistribution::truncated_normal;
      // The same expressions as random_value, evaluated by the same host libm.
      params.cdf_low = normal_cdf((spec.low - spec.a) / spec.b);
      params.cdf_high = normal_cdf((spec.high - spec.a) / spec.b);
      break;
  }
  return params;
}

void random_kernel(const Tensor& tensor, const RandomSpec& spec) {
  if (!is_floating(tensor.dtype())) unsupported_dtype("random", tensor.device(), tensor.dtype());
  TITAN_CHECK(tensor.is_contiguous(), "random on {}: needs a contiguous tensor (shape {})", tensor.device().str(),
              shape_str(tensor.shape()));
  const int64_t n = tensor.numel();
  if (n == 0) return;
  const RandomParams params = params_for(spec);
  const cudaStream_t stream = current_stream();
  if (tensor.dtype() == DType::f32 || tensor.dtype() == DType::bf16) {
    TITAN_CUDA_CHECK(launch_random(tensor.dtype(), tensor.data_ptr(), n, params, stream));
    return;
  }
  Tensor drawn = Tensor::empty(tensor.shape(), DType::f32, tensor.device());
  TITAN_CUDA_CHECK(launch_random(DType::f32, drawn.data_ptr(), n, params, stream));
  TITAN_CUDA_CHECK(launch_convert(tensor.data_ptr(), tensor.dtype(), drawn.data_ptr(), DType::f32, n, stream));
}

}  // namespace

void register_random() { random_kernels.set_kernel(DeviceType::cuda, random_kernel); }

}  // namespace titan::ops::cuda
