// Gated DeltaNet's short convolution: a depthwise causal conv1d over time
// followed by SiLU (transformers' causal_conv1d_fn with activation "silu").
// For x [B, T, C] and weight [C, K]:
//   y[b, t, c] = silu(sum_j weight[c, j] * x[b, t - (K - 1) + j, c])
// where sources before the sequence start, or (with document_ids [B, T]) in an
// earlier document than token t, count as zero: the conv restarts with each
// packed document, as FLA's varlen conv does.
//
// Kernels: CPU (ops/cpu/kernels/causal_conv1d.cpp, every kernel set) and CUDA
// (ops/cuda/causal_conv1d.cu). Each output sums its K products in f32 (CUDA)
// or f64 (CPU); the weight gradient sums over B x T in a fixed order on both.
#pragma once

#include <utility>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// y has x's dtype and device. x and weight are f32 or bf16 (either may be
// either); document_ids i32 or i64.
Tensor causal_conv1d_silu(const Tensor& x, const Tensor& weight, const Tensor& document_ids = Tensor());
// Gradients of x (x's dtype) and weight (weight's dtype), recomputing the pre-activation.
std::pair<Tensor, Tensor> causal_conv1d_silu_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                                                      const Tensor& document_ids = Tensor());

// What a kernel receives: contiguous tensors of checked shapes on one device;
// an undefined document_ids means one document per row.
using CausalConv1dKernel = void(const Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& document_ids);
using CausalConv1dBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_y,
                                        const Tensor& x, const Tensor& weight, const Tensor& document_ids);
inline Op<CausalConv1dKernel> causal_conv1d_kernels{"causal_conv1d_silu"};
inline Op<CausalConv1dBackwardKernel> causal_conv1d_backward_kernels{"causal_conv1d_silu_backward"};

}  // namespace titan::ops
