// Cross-entropy over a vocabulary, plain (from logits) and fused with the
// output projection (from hidden states, never holding the whole logits).
#pragma once

#include <functional>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

struct CrossEntropyOptions {
  int64_t ignore_index = -100;  // targets equal to this contribute neither loss nor gradient
  float softcap = 0.0f;         // > 0: logits become softcap * tanh(logits / softcap) first
  float z_loss = 0.0f;          // > 0: adds z_loss * lse^2 per token (PaLM's auxiliary loss)
  bool mean = true;             // mean over non-ignored tokens (else their sum)
};

struct CrossEntropyOutput {
  Tensor loss;                 // 0-d f32: the cross-entropy (+ z-loss), reduced as the options say
  Tensor lse;                  // [N] f32: log-sum-exp of each row's (capped) logits
  int64_t counted_tokens = 0;  // rows whose target is not ignore_index
};

// logits [N, V] (f32 or bf16), targets [N] (i32 or i64).
CrossEntropyOutput cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options);
// d(loss)/d(logits) times grad_loss (a 0-d f32 tensor), in logits' dtype.
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t counted_tokens, const CrossEntropyOptions& options);

struct FusedCrossEntropyOptions {
  CrossEntropyOptions loss;
  int64_t token_chunk = 1024;  // rows of hidden states processed together
  int64_t vocab_chunk = 0;     // vocabulary columns per GEMM (0 = all); smaller saves memory, costs a recompute
  bool compute_grads = true;   // also return d(loss)/d(hidden) and d(loss)/d(weight)
  // Vocabulary parallelism: the weight holds rows [vocab_offset, vocab_offset
  // + V_local) of a vocabulary of vocab_size rows (0: the weight is all of
  // it) and targets are ids in the whole vocabulary. After each token chunk,
  // `combine` gets every row's log-sum-exp over this shard and its target
  // logit (0 where the target lies in another shard) and must replace them by
  // the values over the whole vocabulary (an all-reduce over the shards).
  // grad_hidden is then this shard's part, to be summed over the shards.
  // The pointers are in the tensors' memory: host pointers on the CPU, DEVICE
  // pointers on CUDA, where combine must queue its work (e.g. the all-reduce)
  // on the current stream, which everything after it waits on.
  int64_t vocab_offset = 0;
  int64_t vocab_size = 0;
  std::function<void(float* lse, float* target_logit, int64_t rows)> combine;
};

struct FusedCrossEntropyOutput {
  Tensor loss;                 // 0-d f32
  Tensor grad_hidden;          // [N, D] hidden's dtype: d(loss)/d(hidden), for a loss gradient of 1
  Tensor grad_weight;          // [V, D] f32: d(loss)/d(weight), for a loss gradient of 1
  int64_t counted_tokens = 0;  // rows whose target is not ignore_index (-1: not known on the host, see the CUDA kernel)
};

// loss = cross_entropy(hidden @ weight^T, targets) computed one (token chunk,
// vocabulary chunk) tile at a time: memory for logits is token_chunk x vocab_chunk.
// Gradients are produced in the same pass (the backward only scales them).
FusedCrossEntropyOutput fused_linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                                   const FusedCrossEntropyOptions& options);

using CrossEntropyKernel = void(CrossEntropyOutput& result, const Tensor& logits, const Tensor& targets,
                                const CrossEntropyOptions& options);
using CrossEntropyBackwardKernel = void(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                        const Tensor& targets, const Tensor& lse, int64_t counted_tokens,
                                        const CrossEntropyOptions& options);
using FusedCrossEntropyKernel = void(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                                     const Tensor& targets, const FusedCrossEntropyOptions& options);
inline Op<CrossEntropyKernel> cross_entropy_kernels{"cross_entropy"};
inline Op<CrossEntropyBackwardKernel> cross_entropy_backward_kernels{"cross_entropy_backward"};
inline Op<FusedCrossEntropyKernel> fused_cross_entropy_kernels{"fused_linear_cross_entropy"};

}  // namespace titan::ops
