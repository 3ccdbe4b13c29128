#include "titan/models/flux/flow_matching.h"

#include <cmath>

#include "titan/core/error.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/random.h"

namespace titan::models::flux {

FlowPair flow_pair(const Tensor& x0, const Tensor& noise, const Tensor& t) {
  TITAN_CHECK(x0.defined() && noise.defined() && x0.shape() == noise.shape() && x0.dim() >= 1,
              "flow_pair: the latent and the noise must have one shape");
  TITAN_CHECK(t.defined() && t.dim() == 1 && t.size(0) == x0.size(0),
              "flow_pair: timesteps {} must be one per sample of {}", shape_str(t.shape()), shape_str(x0.shape()));
  Shape per_sample(static_cast<size_t>(x0.dim()), 1);
  per_sample[0] = x0.size(0);
  const Tensor weight = t.to(x0.dtype()).view(per_sample).expand(x0.shape()).contiguous();
  const Tensor target = ops::sub(noise, x0);
  // x0 + t (noise - x0) = (1 - t) x0 + t noise.
  return {ops::add(x0, ops::mul(weight, target)), target};
}

double shift_mu(int64_t image_tokens, double base_shift, double max_shift, int64_t base_tokens, int64_t max_tokens) {
  TITAN_CHECK(max_tokens > base_tokens, "shift_mu: max_tokens {} must exceed base_tokens {}", max_tokens, base_tokens);
  const double slope = (max_shift - base_shift) / static_cast<double>(max_tokens - base_tokens);
  return base_shift + slope * static_cast<double>(image_tokens - base_tokens);
}

double time_shift(double mu, double sigma, double t) {
  if (t <= 0.0) return 0.0;
  if (t >= 1.0) return 1.0;
  return std::exp(mu) / (std::exp(mu) + std::pow(1.0 / t - 1.0, sigma));
}

Tensor sample_timesteps(int64_t batch, double logit_mean, double logit_std, double mu, Generator& generator) {
  TITAN_CHECK(batch > 0 && logit_std > 0, "sample_timesteps: needs a batch and a positive spread (got {}, {})", batch,
              logit_std);
  const Tensor logits = Tensor::empty({batch});
  ops::normal_(logits, logit_mean, logit_std, generator);
  std::vector<float> t = logits.to_floats();
  for (float& value : t) value = static_cast<float>(time_shift(mu, 1.0, 1.0 / (1.0 + std::exp(-double{value}))));
  return Tensor::from_floats(t, {batch});
}

std::vector<double> sampling_schedule(int64_t num_steps, int64_t image_tokens, bool shift) {
  TITAN_CHECK(num_steps > 0, "sampling_schedule: needs at least one step (got {})", num_steps);
  const double mu = shift ? shift_mu(image_tokens) : 0.0;
  std::vector<double> times(static_cast<size_t>(num_steps + 1));
  for (int64_t i = 0; i <= num_steps; ++i) {
    const double t = 1.0 - static_cast<double>(i) / static_cast<double>(num_steps);
    times[static_cast<size_t>(i)] = shift ? time_shift(mu, 1.0, t) : t;
  }
  return times;
}

Tensor pack_latents(const Tensor& latents) {
  TITAN_CHECK(latents.dim() == 4 && latents.size(2) % 2 == 0 && latents.size(3) % 2 == 0,
              "pack_latents: latents must be [B, C, H, W] with H and W even (got {})", shape_str(latents.shape()));
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2) / 2, w = latents.size(3) / 2;
  return latents.contiguous().view({b, c, h, 2, w, 2}).permute({0, 2, 4, 1, 3, 5}).contiguous().view({b, h * w, c * 4});
}

Tensor unpack_latents(const Tensor& packed, int64_t height, int64_t width) {
  TITAN_CHECK(height % 2 == 0 && width % 2 == 0 && packed.dim() == 3 && packed.size(1) == (height / 2) * (width / 2) &&
                  packed.size(2) % 4 == 0,
              "unpack_latents: {} tokens are not a {} x {} latent's 2x2 patches", shape_str(packed.shape()), height,
              width);
  const int64_t b = packed.size(0), c = packed.size(2) / 4, h = height / 2, w = width / 2;
  return packed.contiguous()
      .view({b, h, w, c, 2, 2})
      .permute({0, 3, 1, 4, 2, 5})
      .contiguous()
      .view({b, c, height, width});
}

Tensor latent_position_ids(int64_t batch, int64_t height, int64_t width) {
  TITAN_CHECK(batch > 0 && height > 0 && width > 0 && height % 2 == 0 && width % 2 == 0,
              "latent_position_ids: a {} x {} latent (batch {}) does not split into 2x2 patches", height, width, batch);
  const int64_t h = height / 2, w = width / 2;
  std::vector<int64_t> ids(static_cast<size_t>(batch * h * w * 3), 0);
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t row = 0; row < h; ++row) {
      for (int64_t column = 0; column < w; ++column) {
        const auto at = static_cast<size_t>(((s * h + row) * w + column) * 3);
        ids[at + 1] = row;
        ids[at + 2] = column;
      }
    }
  }
  return Tensor::from_vector(ids, {batch, h * w, 3});
}

}  // namespace titan::models::flux
