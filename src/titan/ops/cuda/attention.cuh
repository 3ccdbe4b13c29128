// What the files of the CUDA flash attention share: the problem description,
// the kernels' limits, and the launchers one file defines and another calls
// (attention.cu holds the Tensor side and the forward kernel). All tensors
// are contiguous: q, out, grad_out, grad_q [B, Sq, Hq, D]; k, v, grad_k,
// grad_v [B, Sk, Hkv, D]; lse and delta [B, Hq, Sq] f32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace titan::ops::cuda {

// Head dims up to this work (register tiles are sized for 64 or 128).
inline constexpr int kAttentionMaxHeadDim = 128;
// Rows of queries and keys per tile; grids hold at most 65535 tiles per head.
inline constexpr int kAttentionTile = 64;
inline constexpr int64_t kAttentionMaxLength = int64_t{65535} * kAttentionTile;

enum class AttentionElement { f32, bf16 };

struct AttentionProblem {
  int64_t batch = 0;
  int q_len = 0, k_len = 0, heads = 0, kv_heads = 0, dim = 0;
  // Query i sits at position q_offset + i relative to key 0 (ops/attention.h:
  // k_len - q_len unless the mask places the chunks, as context parallelism does).
  int q_offset = 0;
  bool causal = true;
  int window = 0;  // 0 = unlimited; the caller clamps windows no query-key distance reaches to 0
  // [B, Sk] document ids, at most one set; both null = one document.
  const int32_t* doc32 = nullptr;
  const int64_t* doc64 = nullptr;
  // [B, Sq] the queries' own ids, at most one set; both null = the keys' ids at the queries' positions.
  const int32_t* q_doc32 = nullptr;
  const int64_t* q_doc64 = nullptr;
  float scale = 1.0f;
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) before the
  // mask and softmax (ops/attention.h's logit_softcap); 0: no cap.
  float softcap = 0.0f;
};

// Defined in attention_backward.cu. `delta` is scratch of B * Hq * Sq floats (it receives rowsum(dO * O)).
cudaError_t launch_attention_backward(AttentionElement element, const AttentionProblem& problem, const void* grad_out,
                                      const void* q, const void* k, const void* v, const void* out, const float* lse,
                                      float* delta, void* grad_q, void* grad_k, void* grad_v, cudaStream_t stream);

// The tensor-core kernels (attention_tensor_core_*.cu), which the forward
// launcher (attention.cu) and the one above pick by themselves: whether a problem qualifies (bf16, D = 64
// or 128, every tensor 16-byte aligned, an sm_80+ device), and the launchers.
// The gradient launcher expects `delta` already computed.
bool attention_tensor_cores(AttentionElement element, const AttentionProblem& problem,
                            std::initializer_list<const void*> tensors);
cudaError_t launch_attention_forward_tensor_core(const AttentionProblem& problem, const void* q, const void* k,
                                                 const void* v, void* out, float* lse, cudaStream_t stream);
cudaError_t launch_attention_gradients_tensor_core(const AttentionProblem& problem, const void* grad_out, const void* q,
                                                   const void* k, const void* v, const float* lse, const float* delta,
                                                   void* grad_q, void* grad_k, void* grad_v, cudaStream_t stream);

}  // namespace titan::ops::cuda
