// Launchers for the CUDA elementwise kernels (contiguous operands of n
// elements; dtype f32 or bf16, checked by elementwise.cpp). Math runs in f32
// and each output is rounded once, as in the CPU kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

enum class BinaryKind { add, sub, mul };

// out = a + alpha * b, a - alpha * b, or a * b. out may alias a. `b_dtype` is
// `dtype`, or bf16 with dtype f32 (accumulating a bf16 gradient into f32).
cudaError_t launch_binary(BinaryKind op, DType dtype, DType b_dtype, void* out, const void* a, const void* b,
                          float alpha, int64_t n, cudaStream_t stream);
// out = a * factor, or * *factor_in_memory (device memory) when that is not
// null; out may alias a.
cudaError_t launch_scale(DType dtype, void* out, const void* a, float factor, const float* factor_in_memory, int64_t n,
                         cudaStream_t stream);
// out[0] = sqrt(sum_squares[0]), out[1] = min(1, max_norm / (norm + 1e-6)) (1 when max_norm <= 0).
cudaError_t launch_clip_scalars(float* out, const float* sum_squares, double max_norm, cudaStream_t stream);
cudaError_t launch_silu(DType dtype, void* out, const void* x, int64_t n, cudaStream_t stream);
cudaError_t launch_silu_backward(DType dtype, void* grad_x, const void* grad_out, const void* x, int64_t n,
                                 cudaStream_t stream);
cudaError_t launch_swiglu(DType dtype, void* out, const void* gate, const void* up, int64_t n, cudaStream_t stream);
cudaError_t launch_swiglu_backward(DType dtype, void* grad_gate, void* grad_up, const void* grad_out, const void* gate,
                                   const void* up, int64_t n, cudaStream_t stream);
// geglu(gate, up) = gelu_tanh(gate) * up and its two input gradients.
cudaError_t launch_geglu(DType dtype, void* out, const void* gate, const void* up, int64_t n, cudaStream_t stream);
cudaError_t launch_geglu_backward(DType dtype, void* grad_gate, void* grad_up, const void* grad_out, const void* gate,
                                  const void* up, int64_t n, cudaStream_t stream);
// out = cap * tanh(x / cap) (cap > 0); its gradient from the output y: dy * (1 - (y / cap)^2).
cudaError_t launch_soft_cap(DType dtype, void* out, const void* x, float cap, int64_t n, cudaStream_t stream);
cudaError_t launch_soft_cap_backward(DType dtype, void* grad_x, const void* grad_out, const void* y, float cap,
                                     int64_t n, cudaStream_t stream);

}  // namespace titan::ops::cuda
