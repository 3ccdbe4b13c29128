// Launchers for the CUDA RMSNorm kernels: x [rows, dim] and weight [dim],
// contiguous, one dtype (f32 or bf16, checked by rms_norm.cpp); rstd [rows] f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

cudaError_t launch_rms_norm(DType dtype, void* y, float* rstd, const void* x, const void* weight, float eps,
                            int64_t rows, int64_t dim, cudaStream_t stream);

// f32 elements of device scratch launch_rms_norm_backward needs (per-chunk
// partial sums of grad_weight, reduced in a fixed order: no float atomics).
int64_t rms_norm_backward_scratch_size(int64_t rows, int64_t dim);
cudaError_t launch_rms_norm_backward(DType dtype, void* grad_x, void* grad_weight, const void* grad_y, const void* x,
                                     const void* weight, const float* rstd, float* scratch, int64_t rows, int64_t dim,
                                     cudaStream_t stream);

}  // namespace titan::ops::cuda
