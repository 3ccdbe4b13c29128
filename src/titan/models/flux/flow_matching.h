// Rectified flow, FLUX.1's objective, and the latent layout its transformer
// reads: a noised latent is the straight line x_t = (1 - t) x0 + t * noise
// between the image's latent x0 (t = 0) and Gaussian noise (t = 1), and the
// model learns the line's velocity, noise - x0. Training draws t from a
// logit-normal shifted towards noise for larger images (SD3's resolution-
// dependent shift, which FLUX.1's sampler also uses); sampling integrates the
// velocity from t = 1 to 0 with Euler steps over the same shifted schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "titan/core/generator.h"
#include "titan/core/tensor.h"

namespace titan::models::flux {

struct FlowPair {
  Tensor noised;  // (1 - t) x0 + t * noise
  Tensor target;  // noise - x0: the velocity to predict
};
// x0 and noise [B, ...] (same shape and dtype), t [B] f32 in [0, 1].
FlowPair flow_pair(const Tensor& x0, const Tensor& noise, const Tensor& t);

// FLUX.1's shift for an image of `image_tokens` packed latent tokens: mu
// rises linearly from base_shift at base_tokens to max_shift at max_tokens
// (0.5 at 256 tokens, 1.15 at 4,096: 256 and 1,024 pixels square).
double shift_mu(int64_t image_tokens, double base_shift = 0.5, double max_shift = 1.15, int64_t base_tokens = 256,
                int64_t max_tokens = 4096);
// exp(mu) / (exp(mu) + (1 / t - 1)^sigma): t moved towards 1 (noise) for mu > 0;
// 0 and 1 stay where they are.
double time_shift(double mu, double sigma, double t);

// B training timesteps [B] f32: sigmoid(N(logit_mean, logit_std)), then
// time_shift(mu, 1, .) (mu = 0: no shift).
Tensor sample_timesteps(int64_t batch, double logit_mean, double logit_std, double mu, Generator& generator);

// num_steps + 1 times from 1 down to 0, evenly spaced, then shifted by
// shift_mu(image_tokens) when `shift` (FLUX.1-dev; schnell samples unshifted).
std::vector<double> sampling_schedule(int64_t num_steps, int64_t image_tokens, bool shift);

// [B, C, H, W] latents -> [B, (H / 2) * (W / 2), C * 4] tokens, each a 2x2
// patch, rows then columns, features channel-major ((c, py, px)).
Tensor pack_latents(const Tensor& latents);
// The inverse, for a latent of H x W.
Tensor unpack_latents(const Tensor& packed, int64_t height, int64_t width);
// [B, (H / 2) * (W / 2), 3] i64 position ids of the packed tokens: (0, patch row, patch column).
Tensor latent_position_ids(int64_t batch, int64_t height, int64_t width);

}  // namespace titan::models::flux
