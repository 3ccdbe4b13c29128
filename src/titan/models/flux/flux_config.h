// FLUX.1 (Black Forest Labs; TorchTitan's `flux` model): a rectified-flow
// diffusion transformer that predicts the velocity of a noised image latent
// given a text prompt. Not a decoder family (models/families.h): it has its
// own inputs (patchified latents, T5 and CLIP embeddings, a timestep) and its
// own objective. The hyper-parameters, with TorchTitan's flavors.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace titan::models::flux {

struct FluxConfig {
  int64_t in_channels = 64;       // a 2x2 patch of the autoencoder's 16 latent channels
  int64_t out_channels = 64;      //
  int64_t vec_in_dim = 768;       // CLIP-L's pooled output
  int64_t context_in_dim = 4096;  // T5-XXL's hidden size
  int64_t hidden_size = 3072;
  double mlp_ratio = 4.0;
  int64_t num_heads = 24;
  int64_t depth = 19;                // double-stream blocks
  int64_t depth_single_blocks = 38;  // single-stream blocks
  // RoPE over (text index, latent row, latent column): each axis rotates its
  // own share of a head's features, in that order; they sum to the head width.
  std::array<int64_t, 3> axes_dim = {16, 56, 56};
  double theta = 10000.0;
  bool qkv_bias = true;
  // FLUX.1-dev's distilled guidance: a second timestep-style embedding of the
  // guidance scale added to the conditioning vector (Black Forest Labs'
  // guidance_in). schnell and TorchTitan's flavors have none.
  bool guidance_embed = false;
  double norm_eps = 1e-6;  // the blocks' LayerNorms (no learned affine)
  double qk_norm_eps = 1e-6;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t mlp_hidden_dim() const { return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio); }
  // A clear error naming the field that makes the model impossible.
  void validate() const;
};

// TorchTitan's flavors: flux-debug (2 + 2 blocks of width 1536), flux-schnell
// and flux-dev (19 + 38 blocks of width 3072; dev with the guidance embedding).
FluxConfig flux_flavor(const std::string& flavor);
std::vector<std::string> flux_flavor_names();

}  // namespace titan::models::flux
