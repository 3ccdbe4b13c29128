#include "titan/train/flux/flux_batch.h"

#include "titan/core/error.h"
#include "titan/models/flux/flow_matching.h"
#include "titan/nn/functional.h"

namespace titan::train::flux {

using models::flux::FluxConfig;
using models::flux::FluxInputs;

FluxInputs flux_inputs(const FluxConfig& config, const FluxBatch& batch, const Tensor& noised, const Tensor& t,
                       DType dtype) {
  const int64_t b = batch.size(), h = batch.latents.size(2), w = batch.latents.size(3);
  TITAN_CHECK(batch.t5.defined() && batch.t5.dim() == 3 && batch.t5.size(0) == b && batch.clip.defined() &&
                  batch.clip.dim() == 2 && batch.clip.size(0) == b,
              "flux batch: t5 must be [B={}, Lt, d] and clip [B, d] (got {} and {})", b,
              batch.t5.defined() ? shape_str(batch.t5.shape()) : "nothing",
              batch.clip.defined() ? shape_str(batch.clip.shape()) : "nothing");
  TITAN_CHECK(batch.latents.dim() == 4 && 4 * batch.latents.size(1) == config.in_channels,
              "flux batch: latents [B, C, H, W] with 4 C = the model's in_channels {} (got {})", config.in_channels,
              shape_str(batch.latents.shape()));
  FluxInputs inputs;
  inputs.img = models::flux::pack_latents(noised).to(dtype);
  inputs.img_ids = models::flux::latent_position_ids(b, h, w);
  inputs.txt = batch.t5.to(dtype);
  inputs.txt_ids = Tensor::zeros({b, batch.t5.size(1), 3}, DType::i64);
  inputs.timesteps = t;
  inputs.y = batch.clip.to(dtype);
  if (config.guidance_embed) inputs.guidance = Tensor::full({b}, 1.0f);
  return inputs;
}

void TokenSlice::check(int64_t text_tokens, int64_t image_tokens) const {
  TITAN_CHECK(text_tokens % ranks == 0 && image_tokens % ranks == 0 && (text_tokens + image_tokens) / ranks % 2 == 0,
              "flux: context_parallel_degree {} must divide the {} text tokens (encoder.max_t5_encoding_len) and "
              "the {} image tokens ((training.img_size / 16)^2), leaving each rank an even number of tokens (ring "
              "attention's two chunks)",
              ranks, text_tokens, image_tokens);
}

Tensor TokenSlice::of(const Tensor& x) const {
  if (ranks == 1) return x;
  const int64_t length = x.size(1) / ranks;
  return x.narrow(1, rank * length, length).contiguous();
}

Tensor flow_matching_loss(const models::flux::FluxModel& model, const FluxBatch& batch, const Tensor& noise,
                          const Tensor& t, DType dtype, const TokenSlice& slice) {
  const models::flux::FlowPair pair = models::flux::flow_pair(batch.latents, noise, t);
  FluxInputs inputs = flux_inputs(model.config, batch, pair.noised, t, dtype);
  if (slice.ranks > 1) {
    slice.check(inputs.txt.size(1), inputs.img.size(1));
    for (Tensor* tokens : {&inputs.img, &inputs.img_ids, &inputs.txt, &inputs.txt_ids}) *tokens = slice.of(*tokens);
  }
  const Tensor velocity = F::cast(model.forward(inputs), DType::f32);
  const Tensor difference = F::sub(velocity, slice.of(models::flux::pack_latents(pair.target)));
  return F::mean(F::mul(difference, difference));
}

double flux_training_flops(const FluxConfig& config, int64_t text_tokens, int64_t image_tokens) {
  const auto d = static_cast<double>(config.hidden_size), m = static_cast<double>(config.mlp_hidden_dim());
  const double tokens = static_cast<double>(text_tokens + image_tokens);
  // Multiply-adds per token: a double block's stream (qkv, proj, MLP, and its
  // 6-way modulation, computed once per example: not counted) and a single
  // block (linear1 to q, k, v and the MLP input; linear2 back).
  const double double_stream = 3 * d * d + d * d + 2 * d * m;
  const double single = d * (3 * d + m) + (d + m) * d;
  const double gemm = tokens * (static_cast<double>(config.depth) * double_stream +
                                static_cast<double>(config.depth_single_blocks) * single);
  const double embed = static_cast<double>(image_tokens) * (static_cast<double>(config.in_channels) * d +
                                                            d * static_cast<double>(config.out_channels)) +
                       static_cast<double>(text_tokens) * static_cast<double>(config.context_in_dim) * d;
  // Scores and the weighted sum over the joint sequence, every block.
  const double attention = 2 * tokens * tokens * d * static_cast<double>(config.depth + config.depth_single_blocks);
  return 3 * 2 * (gemm + embed + attention);
}

}  // namespace titan::train::flux
