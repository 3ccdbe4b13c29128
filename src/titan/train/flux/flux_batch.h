// What the FLUX trainer learns from: a batch of images already through the
// frozen encoders (the autoencoder's latents, T5's token states, CLIP's
// pooled vector), and the rectified-flow loss of the transformer on it.
#pragma once

#include <functional>

#include "titan/core/tensor.h"
#include "titan/models/flux/flux_model.h"

namespace titan::train::flux {

struct FluxBatch {
  Tensor latents;  // [B, C, H, W] f32: the autoencoder's scaled latents
  Tensor t5;       // [B, Lt, context_in_dim] f32: T5's last hidden states
  Tensor clip;     // [B, vec_in_dim] f32: CLIP's pooled output
  // The place of the first example in the run's sequence of examples (the
  // rest follow it): what its random draws are keyed by.
  int64_t first_example = 0;
  int64_t size() const { return latents.size(0); }
};
using FluxBatchSource = std::function<FluxBatch()>;

// The transformer's inputs for `batch` noised to x_t = (1 - t) x0 + t noise
// (noise like batch.latents, t [B] f32): packed patches, their position ids,
// zero text ids, every float input cast to `dtype` (the compute dtype, as
// FSDP's cast of forward inputs does). Models that embed the guidance scale
// (flux-dev) are given 1: training does not distil guidance.
models::flux::FluxInputs flux_inputs(const models::flux::FluxConfig& config, const FluxBatch& batch,
                                     const Tensor& noised, const Tensor& t, DType dtype);

// Under context parallelism, the tokens this rank holds: slice `rank` of
// `ranks` equal contiguous slices of the text tokens and of the image tokens
// (each stream cut on its own, so that every rank runs both streams' weights).
struct TokenSlice {
  int64_t rank = 0, ranks = 1;
  // Refuses, naming the keys, unless both streams cut evenly into `ranks` and a
  // rank's tokens are even in number (ring attention's two chunks per rank).
  void check(int64_t text_tokens, int64_t image_tokens) const;
  // x [B, L, ...] -> this rank's [B, L / ranks, ...] (a contiguous copy).
  Tensor of(const Tensor& x) const;
};

// The rectified-flow loss: the mean over every element of the squared
// difference between the velocity `model` predicts at x_t and noise - x0, on
// the tokens of `slice` (the mean of the ranks' losses is the whole loss: the
// slices are equal). A scalar f32 tensor, differentiable in the model's parameters.
Tensor flow_matching_loss(const models::flux::FluxModel& model, const FluxBatch& batch, const Tensor& noise,
                          const Tensor& t, DType dtype, const TokenSlice& slice = {});

// Forward plus backward FLOPs of one training example: every GEMM (each
// token through its stream's or the shared weights) and attention's two
// score products per block, times 3 (a backward costs two forwards).
double flux_training_flops(const models::flux::FluxConfig& config, int64_t text_tokens, int64_t image_tokens);

}  // namespace titan::train::flux
