// Launchers for the CUDA copy and fill kernels. Plain pointers, dtypes and
// sizes only: .cu files stay free of fmt and Tensor so nvcc compiles them
// cleanly; the Tensor plumbing (and the collapsing of layouts) lives in copy.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

// An n-dimensional index space walked in row-major order, with the element
// strides of the destination and the source at each dim (fills ignore `src`).
// Callers first merge dims that are contiguous in both, so a few dims suffice.
inline constexpr int kMaxCopyDims = 8;
struct CopyLayout {
  int dims = 0;
  int64_t sizes[kMaxCopyDims] = {};
  int64_t dst_strides[kMaxCopyDims] = {};
  int64_t src_strides[kMaxCopyDims] = {};
};

// dst[i] = src[i] converted, for n contiguous elements of any dtype pair.
// Conversions are those of the CPU copy (core/dtype.cpp) bit for bit: through
// f32 with round-to-nearest-even for the float formats, truncation for ints;
// a same-dtype copy moves the bits unchanged.
cudaError_t launch_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n,
                           cudaStream_t stream);
// The same for any strides.
cudaError_t launch_strided_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype, const CopyLayout& layout,
                                cudaStream_t stream);

cudaError_t launch_f32_to_bf16(void* dst, const void* src, int64_t n, cudaStream_t stream);
cudaError_t launch_bf16_to_f32(void* dst, const void* src, int64_t n, cudaStream_t stream);

// Fills n elements of element_size bytes (1, 2, 4 or 8) with the bit pattern in `bits`.
cudaError_t launch_fill_bits(void* dst, int element_size, uint64_t bits, int64_t n, cudaStream_t stream);
// The same through `layout`'s destination strides.
cudaError_t launch_strided_fill_bits(void* dst, int element_size, uint64_t bits, const CopyLayout& layout,
                                     cudaStream_t stream);

}  // namespace titan::ops::cuda
