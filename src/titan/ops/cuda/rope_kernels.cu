// CUDA rotary embedding: one thread per rotated pair, so consecutive threads
// read consecutive cos/sin entries and (for either pairing) neighbouring x.
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/rope_kernels.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void rope(T* __restrict__ out, const T* __restrict__ x, const float* __restrict__ cos,
                     const float* __restrict__ sin, const void* __restrict__ positions, int position_bytes,
                     RopeShape shape, bool interleaved, float sign) {
  const int64_t half = shape.head_dim / 2;
  const int64_t pairs = shape.batch * shape.seq * shape.heads * half;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    const int64_t row = p / half;  // token * heads + head
    const int64_t token = row / shape.heads;
    int64_t position = token % shape.seq;
    if (position_bytes == 8) {
      position = static_cast<const int64_t*>(positions)[token];
    } else if (position_bytes == 4) {
      position = static_cast<const int32_t*>(positions)[token];
    }
    const int64_t first = row * shape.head_dim + (interleaved ? 2 * i : i);
    const int64_t second = first + (interleaved ? 1 : half);
    if (position < 0 || position >= shape.max_positions) {
      store_f32(out, first, NAN);
      store_f32(out, second, NAN);
      continue;
    }
    const float c = cos[position * half + i];
    const float s = sign * sin[position * half + i];
    const float x0 = load_f32(x, first), x1 = load_f32(x, second);
    store_f32(out, first, x0 * c - x1 * s);
    store_f32(out, second, x0 * s + x1 * c);
  }
}

}  // namespace

cudaError_t launch_rope(DType dtype, void* out, const void* x, const float* cos, const float* sin,
                        const void* positions, int position_bytes, const RopeShape& shape, bool interleaved,
                        bool inverse, cudaStream_t stream) {
  const int64_t pairs = shape.batch * shape.seq * shape.heads * (shape.head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  const float sign = inverse ? -1.0f : 1.0f;
  if (positions == nullptr) position_bytes = 0;
  if (dtype == DType::bf16) {
    rope<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out),
                                                             static_cast<const __nv_bfloat16*>(x), cos, sin, positions,
                                                             position_bytes, shape, interleaved, sign);
  } else {
    rope<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(x),
                                                             cos, sin, positions, position_bytes, shape, interleaved,
                                                             sign);
  }
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
