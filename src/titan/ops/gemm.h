// Matrix multiplication: C = alpha * A @ B + beta * C, optionally batched.
// A is [M, K] or [batch, M, K], B is [K, N] or [batch, K, N] (a batch of 1
// broadcasts), C is [M, N] or [batch, M, N]. A and B may be transposed views:
// each matrix needs a unit stride in one of its two inner dims. A and B share a
// dtype (f32 or bf16); C is f32 or bf16; products accumulate in f32.
#pragma once

#include <optional>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, float alpha = 1.0f, float beta = 0.0f);
// Allocates C; its dtype defaults to A's.
Tensor matmul(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype = std::nullopt);

using GemmKernel = void(const Tensor& a, const Tensor& b, const Tensor& c, float alpha, float beta);
inline Op<GemmKernel> gemm_kernels{"gemm"};

}  // namespace titan::ops
