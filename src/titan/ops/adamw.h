// Fused multi-tensor AdamW (Loshchilov & Hutter, decoupled weight decay) with
// bias correction, matching torch.optim.AdamW:
//   p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// One pass over each tensor reads p, g, m, v once and writes p, m, v once.
#pragma once

#include <span>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  int64_t step = 1;  // 1-based step count after this update (for bias correction)
  // Optional [3] f32 on the parameters' device holding adamw_step_scalars() of
  // this step. Kernels then read the learning rate and bias corrections from
  // it instead of from lr and step, so a captured CUDA graph replays each step
  // with that step's values (the host rewrites the tensor before the replay).
  Tensor step_scalars;
};

// The numbers of one step that depend on lr and step, derived in double and
// rounded once: every kernel applies exactly these.
struct AdamWStepScalars {
  float decay;           // 1 - lr * weight_decay
  float step_size;       // lr / (1 - beta1^step)
  float inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^step)
};
AdamWStepScalars adamw_step_scalars(const AdamWHyper& hyper);

// params f32 (or bf16), grads f32 or bf16, moments f32 or bf16 (the state
// dtype); matching shapes per index. Updates params and moments in place.
void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg,
                std::span<const Tensor> exp_avg_sq, const AdamWHyper& hyper);

// Scales every tensor in place (gradient clipping applies norm-derived factors).
void scale_all_(std::span<const Tensor> tensors, float factor);
// Clips to max_norm by the global L2 norm; returns the norm before clipping.
double clip_grad_norm_(std::span<const Tensor> grads, double max_norm);

using AdamWKernel = void(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg,
                         std::span<const Tensor> exp_avg_sq, const AdamWHyper& hyper);
inline Op<AdamWKernel> adamw_kernels{"adamw"};

}  // namespace titan::ops
