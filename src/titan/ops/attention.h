// Scaled dot-product attention for training: a flash-style tiled kernel that
// never materialises the [Sq, Sk] score matrix, with causal, sliding-window and
// packed-document masks and grouped-query attention (Hq a multiple of Hkv).
// Layout is [B, S, H, D], what the q/k/v projections produce with no transpose.
#pragma once

#include <utility>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// Query i (of Sq) sits at absolute position Sk - Sq + i, so Sq < Sk is decoding
// with a KV cache and Sq == Sk is training. Key j is visible from query i iff:
//   causal:         j <= pos(i)
//   sliding_window: pos(i) - j < sliding_window   (0 = unlimited)
//   document_ids:   doc[b, pos(i)] == doc[b, j]   ([B, Sk] i32/i64; undefined = one document)
//
// Context parallelism attends a chunk of queries to a chunk of keys cut from
// elsewhere in the sequence: query_start and key_start then give the absolute
// positions of query 0 and key 0 (query i at query_start + i, key j at
// key_start + j, compared as above), and query_document_ids [B, Sq] the
// queries' own ids. The defaults are the layout above.
//
// logit_softcap > 0 (Gemma 2's attn_logit_softcapping): each scaled score s
// becomes logit_softcap * tanh(s / logit_softcap) before masking and softmax,
// so lse is the log-sum-exp of the capped scores and the backward multiplies
// the gradient w.r.t. a capped score by 1 - tanh^2(s / logit_softcap). Being
// per score, it changes nothing about how pieces merge (attention_merge_).
//
// sinks [Hq] f32 (gpt-oss's attention sinks; undefined = none): a learned
// logit per query head that joins every query row's softmax as one more
// column with no value, so p_ij = exp(z_ij) / (exp(sinks[h]) + sum_j exp(z_ij))
// and a row's weights sum to less than one. lse then includes the sink, and a
// row with no visible key outputs zeros with lse = sinks[h]. Unlike the rest
// of the mask it is not per score: a query row counts its sink exactly once,
// so context parallelism folds it in after merging the pieces
// (attention_fold_sinks_), never per piece.
struct AttentionMask {
  AttentionMask() = default;
  AttentionMask(bool causal, int64_t sliding_window = 0, Tensor document_ids = {})
      : causal(causal), sliding_window(sliding_window), document_ids(std::move(document_ids)) {}

  bool causal = true;
  int64_t sliding_window = 0;
  Tensor document_ids;
  int64_t query_start = -1;  // -1: key_start + Sk - Sq
  int64_t key_start = 0;
  Tensor query_document_ids;   // undefined: document_ids at the queries' positions
  float logit_softcap = 0.0f;  // > 0: each scaled score s becomes logit_softcap * tanh(s / logit_softcap) before
                               // masking and softmax (Gemma 2)
  Tensor sinks;                // [Hq] f32 per-head sink logits (gpt-oss); undefined: none

  // Whether the queries sit where they do by default (the end of the keys, with their ids).
  bool default_layout() const { return query_start < 0 && key_start == 0 && !query_document_ids.defined(); }
  // Query 0's position relative to key 0.
  int64_t query_offset(int64_t q_len, int64_t k_len) const {
    return query_start < 0 ? k_len - q_len : query_start - key_start;
  }
};

struct AttentionOutput {
  Tensor out;  // [B, Sq, Hq, Dv], q's dtype
  Tensor lse;  // [B, Hq, Sq] f32: log-sum-exp of each query's scaled (and capped) scores and its sink (saved for
               // backward)
};
struct AttentionGrads {
  Tensor grad_q, grad_k, grad_v;
  Tensor grad_sinks;  // [Hq] f32 when the mask has sinks, else undefined
};

// q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv], one dtype (f32 or
// bf16); the value head dim Dv may differ from the query/key one D (DeepSeek's
// multi-head latent attention: D = 192, Dv = 128), and out takes Dv.
// A query row with no visible key outputs zeros (lse = -inf, or its sink).
// With mask.sinks, out and lse include them and the backward (given that out
// and lse, and the same mask) also returns grad_sinks.
AttentionOutput flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                float scale);
AttentionGrads flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, const AttentionMask& mask, float scale);

// Errors naming `op` unless the mask's document ids are [B, Sk] (keys) and
// [B, Sq] (queries), and queries placed by query_start/key_start carry their own.
void check_document_ids(const char* op, const AttentionMask& mask, int64_t batch, int64_t q_len, int64_t k_len);

// The same mask as an additive bias [B, Sq, Sk] f32 (0 visible, -inf hidden):
// what the naive reference attention adds to its materialised scores.
Tensor attention_mask_bias(const AttentionMask& mask, int64_t batch, int64_t q_len, int64_t k_len, Device device);

// Context parallelism computes one query chunk's attention piecewise, one key
// chunk at a time; this folds a piece (out [B, S, Hq, D] any float dtype, lse
// [B, Hq, S] f32) into the running f32 result in place: with m = max of the two
// lse, acc = (e^(lse_acc - m) acc + e^(lse - m) out) / (e^(lse_acc - m) + e^(lse - m))
// and lse_acc = m + log(the denominator). Rows with both lse = -inf stay zero.
void attention_merge_(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out, const Tensor& lse);

// Folds the sinks [Hq] f32 into a finished attention result in place (out
// [B, S, Hq, Dv] f32 or bf16, lse [B, Hq, S] f32, both contiguous): each row's
// lse becomes log(e^lse + e^sink) and its out shrinks by e^(lse_old - lse_new).
// The flash op calls it after its kernel, context parallelism after merging.
void attention_fold_sinks_(const Tensor& out, const Tensor& lse, const Tensor& sinks);
// The sinks' gradient [Hq] f32 from a result that includes them (out, lse as
// above, grad_out like out): d sinks[h] = -sum over rows of
// e^(sinks[h] - lse) * (grad_out . out), the softmax's gradient for a column
// with no value. q, k and v take their gradients from the usual backward.
Tensor attention_sinks_backward(const Tensor& grad_out, const Tensor& out, const Tensor& lse, const Tensor& sinks);

using AttentionFoldSinksKernel = void(const Tensor& out, const Tensor& lse, const Tensor& sinks);
using AttentionSinksBackwardKernel = void(const Tensor& grad_sinks, const Tensor& grad_out, const Tensor& out,
                                          const Tensor& lse, const Tensor& sinks);
inline Op<AttentionFoldSinksKernel> attention_fold_sinks_kernels{"attention_fold_sinks"};
inline Op<AttentionSinksBackwardKernel> attention_sinks_backward_kernels{"attention_sinks_backward"};

using AttentionMergeKernel = void(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out, const Tensor& lse);
inline Op<AttentionMergeKernel> attention_merge_kernels{"attention_merge"};

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
