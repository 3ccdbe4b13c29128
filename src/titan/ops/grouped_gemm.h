// The grouped GEMM of a mixture-of-experts layer: the rows of each expert
// (contiguous, `counts[e]` of them, in expert order) times that expert's
// weight, every expert in one call, plus both backward products. Weights are
// stored as one Linear weight per expert: w [E, out, in]. f32 or bf16 operands
// (sharing a dtype), f32 accumulation; counts [E] i64 are read by the kernel,
// never by the host, so a step that calls it stays capturable.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// y [N, out]: y_e = x_e @ w[e]^T for x [N, in].
Tensor grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts);
// grad_x [N, in]: grad_x_e = grad_y_e @ w[e].
Tensor grouped_gemm_input_grad(const Tensor& grad_y, const Tensor& w, const Tensor& counts);
// grad_w [E, out, in]: grad_w[e] = grad_y_e^T @ x_e (zero for an expert with no rows).
Tensor grouped_gemm_weight_grad(const Tensor& grad_y, const Tensor& x, const Tensor& counts);

enum class GroupedGemmKind {
  forward,      // out_e = a_e @ b[e]^T   (a = x, b = w)
  input_grad,   // out_e = a_e @ b[e]     (a = grad_y, b = w)
  weight_grad,  // out[e] = a_e^T @ b_e   (a = grad_y, b = x)
};
using GroupedGemmKernel = void(GroupedGemmKind kind, const Tensor& out, const Tensor& a, const Tensor& b,
                               const Tensor& counts);
inline Op<GroupedGemmKernel> grouped_gemm_kernels{"grouped_gemm"};

}  // namespace titan::ops
