// The gated delta rule, the recurrence of Gated DeltaNet (Qwen3.5's and
// Qwen3-Next's linear-attention layers). Per batch row and value head, with a
// state S of [Dk, Dv] (the layout of transformers and FLA):
//   S_t = exp(g_t) * S_{t-1} + k_t (beta_t * (v_t - exp(g_t) * S_{t-1}^T k_t))^T
//   o_t = S_t^T q_t
// where q_t = scale * l2norm(q_t) and k_t = l2norm(k_t) when normalize_qk (FLA's
// use_qk_l2norm_in_kernel, eps 1e-6 inside the square root), else q_t = scale * q_t.
// g is the log of the per-token decay (g <= 0 in the models), beta the write
// strength in [0, 1].
//
// Two algorithms compute the same function:
//  - recurrent: the loop above, token by token (the reference, and decoding);
//  - chunked: chunks of chunk_size tokens; inside a chunk the recurrence is
//    solved at once through the UT transform (a unit lower-triangular solve),
//    between chunks only the state is passed on (Yang et al., "Gated Delta
//    Networks", 2024). Backward recomputes the chunk-boundary states and walks
//    the chunks in reverse.
// On CUDA each algorithm has its kernels (ops/cuda/delta_rule.cu, the
// recurrence; ops/cuda/delta_rule_chunked.cu, the chunked form for chunks of
// up to 64 tokens and head dims up to 128, else the recurrence).
#pragma once

#include <optional>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

enum class DeltaRuleAlgorithm { chunked, recurrent };

struct DeltaRuleOptions {
  DeltaRuleAlgorithm algorithm = DeltaRuleAlgorithm::chunked;
  // Tokens per chunk (chunked); for the recurrent backward, every how many
  // tokens the state is kept. 1 to 256.
  int64_t chunk_size = 64;
  std::optional<float> scale;  // on q after the l2norm; default 1 / sqrt(Dk)
  bool normalize_qk = true;    // l2norm of q and k rows inside the op
  float qk_norm_eps = 1e-6f;   // x / sqrt(|x|^2 + eps), FLA's l2norm
  // Packed documents: [B, T] i32/i64 ids; where the id changes from token
  // t - 1 to t the state restarts from zero (FLA's cu_seqlens). Undefined: the
  // sequence is one stream. initial_state enters the first document only.
  Tensor document_ids;
};

struct DeltaRuleOutput {
  Tensor out;          // [B, T, Hv, Dv], q's dtype
  Tensor final_state;  // [B, Hv, Dk, Dv] f32
};

struct DeltaRuleGrads {
  Tensor grad_q, grad_k, grad_v;  // their inputs' shapes and dtypes
  Tensor grad_g, grad_beta;       // [B, T, Hv], g's and beta's dtypes
  Tensor grad_initial_state;      // [B, Hv, Dk, Dv] f32; undefined when there was no initial state
};

// q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv] with Hv a multiple of Hk (value head h
// reads key head h / (Hv / Hk), as repeat_interleave would give); q, k, v
// share a dtype (f32 or bf16); g and beta [B, T, Hv], f32 or q's dtype;
// initial_state [B, Hv, Dk, Dv] f32 or undefined (zeros). Math in f32.
DeltaRuleOutput gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                 const Tensor& initial_state, const DeltaRuleOptions& options = {});
// grad_final_state may be undefined (no gradient reaches the final state).
DeltaRuleGrads gated_delta_rule_backward(const Tensor& grad_out, const Tensor& grad_final_state, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                         const Tensor& initial_state, const DeltaRuleOptions& options = {});

// What a kernel receives: contiguous tensors, options.scale resolved; an
// undefined initial_state / grad_final_state means zeros.
struct DeltaRuleInputs {
  Tensor q, k, v, g, beta, initial_state;
};
using DeltaRuleKernel = void(const DeltaRuleOutput& result, const DeltaRuleInputs& in, const DeltaRuleOptions& options);
using DeltaRuleBackwardKernel = void(const DeltaRuleGrads& grads, const Tensor& grad_out,
                                     const Tensor& grad_final_state, const DeltaRuleInputs& in,
                                     const DeltaRuleOptions& options);
inline Op<DeltaRuleKernel> delta_rule_kernels{"gated_delta_rule"};
inline Op<DeltaRuleBackwardKernel> delta_rule_backward_kernels{"gated_delta_rule_backward"};

}  // namespace titan::ops
