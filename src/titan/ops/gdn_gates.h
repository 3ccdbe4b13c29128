// Gated DeltaNet's per-token gates from its small projections a and b
// ([B, T, H], H value heads) and per-head parameters A_log and dt_bias [H]:
//   g    = -exp(A_log[h]) * softplus(a + dt_bias[h])   (the log decay, <= 0)
//   beta = sigmoid(b)                                  (the write strength)
// both f32, as transformers and FLA compute them. softplus is PyTorch's
// (threshold 20: the identity above it). Host loops, as ops/causal_conv1d.h.
#pragma once

#include "titan/core/tensor.h"

namespace titan::ops {

struct GdnGates {
  Tensor g, beta;  // [B, T, H] f32
};
struct GdnGateGrads {
  Tensor grad_a, grad_b, grad_a_log, grad_dt_bias;  // their inputs' dtypes
};

GdnGates gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias);
// Either output gradient may be undefined (no gradient reached it).
GdnGateGrads gdn_gates_backward(const Tensor& grad_g, const Tensor& grad_beta, const Tensor& a, const Tensor& b,
                                const Tensor& a_log, const Tensor& dt_bias);

}  // namespace titan::ops
