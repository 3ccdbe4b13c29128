// The copy kernel's dtype conversion of contiguous elements (defined in
// copy.cu), for the CUDA ops that compute in one dtype and store another:
// random.cu draws in f32 and converts to the other float formats.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

// dst[i] = src[i] converted, for n contiguous elements of any dtype pair.
// Conversions are those of the CPU copy (core/dtype.cpp) bit for bit: through
// f32 with round-to-nearest-even for the float formats, truncation for ints;
// a same-dtype copy moves the bits unchanged.
cudaError_t launch_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n,
                           cudaStream_t stream);

}  // namespace titan::ops::cuda
