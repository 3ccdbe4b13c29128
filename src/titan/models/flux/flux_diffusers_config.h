// Diffusers' config.json of a FluxTransformer2DModel (the "transformer"
// folder of a FLUX.1 pipeline) as titan's FluxConfig, and back: the widths
// and depths that give the weights their shapes. Diffusers fixes what the
// file does not say: an MLP 4x the width, RoPE base 10,000, biased q/k/v,
// LayerNorm and RMSNorm eps 1e-6. Apart from the tensor code so it can be
// fuzzed on its own.
#pragma once

#include <string>
#include <string_view>

#include "titan/models/flux/flux_config.h"

namespace titan::models::flux {

// Errors name `source` and the key at fault. Keys: num_layers,
// num_single_layers, attention_head_dim, num_attention_heads,
// joint_attention_dim, pooled_projection_dim, in_channels, out_channels
// (null: in_channels), guidance_embeds, axes_dims_rope (summing to
// attention_head_dim), patch_size (must be 1: FLUX packs 2x2 patches itself).
FluxConfig parse_diffusers_flux_config(std::string_view text, const std::string& source);
// The file's text (every key above, _class_name first).
std::string diffusers_flux_config_json(const FluxConfig& config);
// The config.json at `path`.
FluxConfig read_diffusers_flux_config(const std::string& path);

}  // namespace titan::models::flux
