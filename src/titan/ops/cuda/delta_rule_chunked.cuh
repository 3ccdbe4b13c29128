// The chunked gated delta rule on CUDA (ops/delta_rule.h's chunked
// algorithm), the launchers delta_rule.cu calls for it. The arithmetic is the
// CPU kernel's (ops/cpu/kernels/delta_rule.cpp, whose header comment derives
// it): per chunk of n tokens, A, U = (I + A)^-1 R, O and the next state;
// backward recomputes the chunk start states and differentiates the chunk
// formulas in reverse. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

// What the chunked kernels read: the problem of delta_rule.cu's DeltaRuleArgs
// (contiguous q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv]).
struct ChunkedDeltaRuleArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* g;
  const void* beta;
  const float* initial_state;  // null: zeros
  const void* document_ids;    // null: one stream
  bool ids_i64, qkv_bf16, g_bf16, beta_bf16;
  int64_t batch, tokens, key_heads, value_heads, dk, dv, chunk;
  float scale, eps;
  bool normalize;
};

// The kernels' limits: chunks of at most 64 tokens, head dims of at most 128.
inline constexpr int64_t kChunkedMaxChunk = 64;
inline constexpr int64_t kChunkedMaxHeadDim = 128;
inline bool chunked_delta_rule_fits(int64_t chunk, int64_t dk, int64_t dv) {
  return chunk >= 1 && chunk <= kChunkedMaxChunk && dk <= kChunkedMaxHeadDim && dv <= kChunkedMaxHeadDim;
}

// Floats of device workspace each launcher needs.
int64_t chunked_forward_workspace(const ChunkedDeltaRuleArgs& a);
int64_t chunked_backward_workspace(const ChunkedDeltaRuleArgs& a);

// out [B, T, Hv, Dv] (q's dtype), final_state [B, Hv, Dk, Dv] f32 (also the working state).
cudaError_t launch_chunked_delta_rule_forward(const ChunkedDeltaRuleArgs& a, void* out, float* final_state,
                                              float* workspace, cudaStream_t stream);

// Writes grad_v and grad_initial_state (when not null) directly, and per
// (batch, token, value head) row the gradients of the scaled, normalised q
// and k rows (partial_qk [2][B * T * Hv][Dk]) and of g and beta
// (partial_gate [B * T * Hv][2]), which delta_rule.cu's finishing kernels
// turn into grad_q, grad_k, grad_g and grad_beta as for the recurrence (one tile).
cudaError_t launch_chunked_delta_rule_backward(const ChunkedDeltaRuleArgs& a, const void* grad_out,
                                               const float* grad_final_state, void* grad_v, float* grad_initial_state,
                                               float* partial_qk, float* partial_gate, float* workspace,
                                               cudaStream_t stream);

}  // namespace titan::ops::cuda
