// Launchers for the CUDA softmax kernels: softmax over the last dim of a
// contiguous [rows, cols] tensor (f32 or bf16, checked by softmax.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

// A row whose entries are all -inf becomes zeros, as on the CPU.
cudaError_t launch_softmax(DType dtype, void* y, const void* x, int64_t rows, int64_t cols, cudaStream_t stream);
// grad_x = y * (grad_y - sum(grad_y * y)) row by row.
cudaError_t launch_softmax_backward(DType dtype, void* grad_x, const void* grad_y, const void* y, int64_t rows,
                                    int64_t cols, cudaStream_t stream);

}  // namespace titan::ops::cuda
