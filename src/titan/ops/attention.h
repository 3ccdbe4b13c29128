// Scaled dot-product attention for training: a flash-style tiled kernel that
// never materialises the [Sq, Sk] score matrix, with causal, sliding-window and
// packed-document masks and grouped-query attention (Hq a multiple of Hkv).
// Layout is [B, S, H, D], what the q/k/v projections produce with no transpose.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// Query i (of Sq) sits at absolute position Sk - Sq + i, so Sq < Sk is decoding
// with a KV cache and Sq == Sk is training. Key j is visible from query i iff:
//   causal:         j <= pos(i)
//   sliding_window: pos(i) - j < sliding_window   (0 = unlimited)
//   document_ids:   doc[b, pos(i)] == doc[b, j]   ([B, Sk] i32/i64; undefined = one document)
struct AttentionMask {
  bool causal = true;
  int64_t sliding_window = 0;
  Tensor document_ids;
};

struct AttentionOutput {
  Tensor out;  // [B, Sq, Hq, D], q's dtype
  Tensor lse;  // [B, Hq, Sq] f32: log-sum-exp of each query's scaled scores (saved for backward)
};
struct AttentionGrads {
  Tensor grad_q, grad_k, grad_v;
};

// q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D], one dtype (f32 or bf16).
// A query row with no visible key outputs zeros (lse = -inf).
AttentionOutput flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                float scale);
AttentionGrads flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, const AttentionMask& mask, float scale);

// The same mask as an additive bias [B, Sq, Sk] f32 (0 visible, -inf hidden):
// what the naive reference attention adds to its materialised scores.
Tensor attention_mask_bias(const AttentionMask& mask, int64_t batch, int64_t q_len, int64_t k_len, Device device);

using FlashAttentionKernel = void(const AttentionOutput& result, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionMask& mask, float scale);
using FlashAttentionBackwardKernel = void(const AttentionGrads& grads, const Tensor& grad_out, const Tensor& q,
                                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                          const AttentionMask& mask, float scale);
using MaskBiasKernel = void(const Tensor& bias, const AttentionMask& mask);
inline Op<FlashAttentionKernel> flash_attention_kernels{"flash_attention"};
inline Op<FlashAttentionBackwardKernel> flash_attention_backward_kernels{"flash_attention_backward"};
inline Op<MaskBiasKernel> mask_bias_kernels{"attention_mask_bias"};

}  // namespace titan::ops
