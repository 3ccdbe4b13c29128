// The FLUX transformer: patchified image latents and T5 text embeddings in,
// the predicted velocity of each image token out. Single-device code; its
// parameters carry TorchTitan's names.
#pragma once

#include <memory>
#include <vector>

#include "titan/core/generator.h"
#include "titan/models/flux/flux_config.h"
#include "titan/models/flux/flux_layers.h"

namespace titan::models::flux {

struct FluxInputs {
  Tensor img;        // [B, Li, in_channels]: the noised latent's 2x2 patches
  Tensor img_ids;    // [B, Li, 3] i64: (0, patch row, patch column)
  Tensor txt;        // [B, Lt, context_in_dim]: T5's last hidden state
  Tensor txt_ids;    // [B, Lt, 3] i64: zeros in FLUX.1
  Tensor timesteps;  // [B] f32 in [0, 1]
  Tensor y;          // [B, vec_in_dim]: CLIP's pooled output
  Tensor guidance;   // [B] f32: the guidance scale, with config.guidance_embed only
};

class FluxModel : public nn::Module {
 public:
  FluxModel(const FluxConfig& config, Device device = Device::cpu());
  // -> [B, Li, out_channels]
  Tensor forward(const FluxInputs& inputs) const;
  // Draws every parameter by its module's rule (TorchTitan's: Xavier-uniform
  // projections, N(0, 0.02) embedders, zero modulations and output).
  void init_weights(Generator generator);
  // Every block's joint attention computes through `core` (nullptr: the
  // attention kernel again); context parallelism installs its ring attention.
  void set_attention_core(const nn::AttentionCore& core);
  const nn::AttentionCore& attention_core() const { return attention_core_; }

  const FluxConfig config;
  std::shared_ptr<nn::Linear> img_in;
  std::shared_ptr<MLPEmbedder> time_in;
  std::shared_ptr<MLPEmbedder> guidance_in;  // null without config.guidance_embed
  std::shared_ptr<MLPEmbedder> vector_in;
  std::shared_ptr<nn::Linear> txt_in;
  std::vector<std::shared_ptr<DoubleStreamBlock>> double_blocks;
  std::vector<std::shared_ptr<SingleStreamBlock>> single_blocks;
  std::shared_ptr<LastLayer> final_layer;

 private:
  nn::AttentionCore attention_core_;
};

}  // namespace titan::models::flux
