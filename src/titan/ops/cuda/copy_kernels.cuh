// Launchers for the CUDA copy and fill kernels. Plain pointers and sizes only:
// .cu files stay free of fmt and Tensor so nvcc compiles them cleanly; the
// Tensor plumbing lives in copy.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

cudaError_t launch_f32_to_bf16(void* dst, const void* src, int64_t n, cudaStream_t stream);
cudaError_t launch_bf16_to_f32(void* dst, const void* src, int64_t n, cudaStream_t stream);
// Fills n elements of element_size bytes (1, 2, 4 or 8) with the bit pattern in `bits`.
cudaError_t launch_fill_bits(void* dst, int element_size, uint64_t bits, int64_t n, cudaStream_t stream);

}  // namespace titan::ops::cuda
