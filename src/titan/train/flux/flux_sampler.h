// Images from a FLUX transformer: noise integrated to latents over the
// shifted schedule with Euler steps (models/flux/flux_sampling.h), with
// classifier-free guidance against the empty prompt's encodings.
#pragma once

#include "titan/core/tensor.h"
#include "titan/models/flux/flux_model.h"

namespace titan::train::flux {

struct SamplingOptions {
  int64_t steps = 50;           // denoising_steps
  bool guidance = false;        // enable_classifier_free_guidance
  double guidance_scale = 5.0;  // classifier_free_guidance_scale
  bool shift = true;            // the schedule shifted for the image's size (FLUX.1-dev; schnell: off)
  uint64_t seed = 0;            // image i's noise comes from seed + i
  DType dtype = DType::f32;     // the transformer's compute dtype
};

// Latents [B, C, h, w] (C = in_channels / 4) for prompts encoded as t5
// [B, Lt, d] and clip [B, d]; empty_t5 [Lt, d] and empty_clip [d] are the
// empty prompt's.
Tensor sample_latents(const models::flux::FluxModel& model, const Tensor& t5, const Tensor& clip,
                      const Tensor& empty_t5, const Tensor& empty_clip, int64_t latent_height, int64_t latent_width,
                      const SamplingOptions& options);

}  // namespace titan::train::flux
