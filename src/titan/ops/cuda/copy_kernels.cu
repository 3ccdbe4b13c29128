#include <cuda_bf16.h>

#include "titan/ops/cuda/copy_kernels.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

template <typename D, typename S>
__global__ void convert(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<D>(static_cast<float>(src[i]));
  }
}

template <typename T>
__global__ void fill(T* dst, T value, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

}  // namespace

cudaError_t launch_f32_to_bf16(void* dst, const void* src, int64_t n, cudaStream_t stream) {
  convert<<<grid_for(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), static_cast<const float*>(src), n);
  return cudaGetLastError();
}

cudaError_t launch_bf16_to_f32(void* dst, const void* src, int64_t n, cudaStream_t stream) {
  convert<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(dst), static_cast<const __nv_bfloat16*>(src), n);
  return cudaGetLastError();
}

cudaError_t launch_fill_bits(void* dst, int element_size, uint64_t bits, int64_t n, cudaStream_t stream) {
  switch (element_size) {
    case 1:
      fill<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint8_t*>(dst), static_cast<uint8_t>(bits), n);
      break;
    case 2:
      fill<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(dst), static_cast<uint16_t>(bits), n);
      break;
    case 4:
      fill<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(dst), static_cast<uint32_t>(bits), n);
      break;
    default:
      fill<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint64_t*>(dst), bits, n);
      break;
  }
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
