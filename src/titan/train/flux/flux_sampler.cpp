#include "titan/train/flux/flux_sampler.h"

#include "titan/autograd/grad_mode.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/models/flux/flow_matching.h"
#include "titan/models/flux/flux_sampling.h"
#include "titan/ops/random.h"
#include "titan/train/flux/flux_batch.h"

namespace titan::train::flux {

Tensor sample_latents(const models::flux::FluxModel& model, const Tensor& t5, const Tensor& clip,
                      const Tensor& empty_t5, const Tensor& empty_clip, int64_t latent_height, int64_t latent_width,
                      const SamplingOptions& options) {
  TITAN_CHECK(options.steps > 0, "flux sampling: denoising_steps must be > 0, got {}", options.steps);
  const autograd::NoGradGuard no_grad;
  const int64_t b = t5.size(0), channels = model.config.in_channels / 4;
  const Tensor noise = Tensor::empty({b, channels, latent_height, latent_width});
  for (int64_t i = 0; i < b; ++i) {
    Generator generator(options.seed + static_cast<uint64_t>(i));
    ops::normal_(noise.narrow(0, i, 1), 0.0, 1.0, generator);
  }
  // The conditioning of each request; the image tokens are the sampler's.
  const FluxBatch conditional{noise, t5, clip, 0};
  const Tensor t = Tensor::zeros({b});
  const models::flux::FluxInputs with_prompt = flux_inputs(model.config, conditional, noise, t, options.dtype);
  const FluxBatch empty{noise, empty_t5.unsqueeze(0).expand({b, empty_t5.size(0), empty_t5.size(1)}).contiguous(),
                        empty_clip.unsqueeze(0).expand({b, empty_clip.size(0)}).contiguous(), 0};
  const models::flux::FluxInputs without_prompt = flux_inputs(model.config, empty, noise, t, options.dtype);
  const models::flux::VelocityField velocity = models::flux::flux_velocity(
      model, with_prompt, options.guidance ? &without_prompt : nullptr, options.guidance_scale);
  const int64_t image_tokens = (latent_height / 2) * (latent_width / 2);
  const std::vector<double> schedule = models::flux::sampling_schedule(options.steps, image_tokens, options.shift);
  const Tensor tokens = models::flux::euler_integrate(velocity, models::flux::pack_latents(noise), schedule);
  return models::flux::unpack_latents(tokens.to(DType::f32), latent_height, latent_width);
}

}  // namespace titan::train::flux
