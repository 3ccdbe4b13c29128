// Gated DeltaNet's short convolution: a depthwise causal conv1d over time
// followed by SiLU (transformers' causal_conv1d_fn with activation "silu").
// For x [B, T, C] and weight [C, K]:
//   y[b, t, c] = silu(sum_j weight[c, j] * x[b, t - (K - 1) + j, c])
// where sources before the sequence start, or (with document_ids [B, T]) in an
// earlier document than token t, count as zero: the conv restarts with each
// packed document, as FLA's varlen conv does.
//
// The kernels are small host loops, single-threaded: on the CPU they read the
// storage directly; on other devices the tensors are copied to the CPU and
// back (under AllowHostReadsScope: such a step cannot be CUDA-graph captured).
// No device kernel yet; the conv is a small share of a Gated DeltaNet layer's
// work next to its projections and the delta rule.
#pragma once

#include <utility>

#include "titan/core/tensor.h"

namespace titan::ops {

// y has x's dtype and device; math in f64.
Tensor causal_conv1d_silu(const Tensor& x, const Tensor& weight, const Tensor& document_ids = Tensor());
// Gradients of x (x's dtype) and weight (weight's dtype), recomputing the pre-activation.
std::pair<Tensor, Tensor> causal_conv1d_silu_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                                                      const Tensor& document_ids = Tensor());

}  // namespace titan::ops
