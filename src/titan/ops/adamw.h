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
};

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
