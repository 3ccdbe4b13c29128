// Gated DeltaNet's per-token gates from its small projections a and b
// ([B, T, H], H value heads) and per-head parameters A_log and dt_bias [H]:
//   g    = -exp(A_log[h]) * softplus(a + dt_bias[h])   (the log decay, <= 0)
//   beta = sigmoid(b)                                  (the write strength)
// both f32, as transformers and FLA compute them. softplus is PyTorch's
// (threshold 20: the identity above it). Kernels: CPU
// (ops/cpu/kernels/gdn_gates.cpp) and CUDA (ops/cuda/gdn_gates.cu); the
// per-head gradients sum over B x T in a fixed order on both.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

struct GdnGates {
  Tensor g, beta;  // [B, T, H] f32
};
struct GdnGateGrads {
  Tensor grad_a, grad_b, grad_a_log, grad_dt_bias;  // their inputs' dtypes
};

// a, b, A_log and dt_bias are each f32 or bf16.
GdnGates gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias);
// Either output gradient may be undefined (no gradient reached it).
GdnGateGrads gdn_gates_backward(const Tensor& grad_g, const Tensor& grad_beta, const Tensor& a, const Tensor& b,
                                const Tensor& a_log, const Tensor& dt_bias);

// What a kernel receives: contiguous tensors of checked shapes on one device;
// an undefined grad_g / grad_beta means zeros.
struct GdnGateInputs {
  Tensor a, b, a_log, dt_bias;
};
using GdnGatesKernel = void(const GdnGates& out, const GdnGateInputs& in);
using GdnGatesBackwardKernel = void(const GdnGateGrads& grads, const Tensor& grad_g, const Tensor& grad_beta,
                                    const GdnGateInputs& in);
inline Op<GdnGatesKernel> gdn_gates_kernels{"gdn_gates"};
inline Op<GdnGatesBackwardKernel> gdn_gates_backward_kernels{"gdn_gates_backward"};

}  // namespace titan::ops
