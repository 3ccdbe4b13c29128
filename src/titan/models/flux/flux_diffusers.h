// FLUX weights in Diffusers' layout (FluxTransformer2DModel, the layout the
// published FLUX.1 transformers ship in): q, k and v as separate projections
// (and a single block's MLP input beside them), the final modulation's halves
// as (scale, shift) where titan and TorchTitan keep (shift, scale), every
// name mapped. Both directions move tensors bit for bit.
#pragma once

#include <map>
#include <string>

#include "titan/core/tensor.h"
#include "titan/models/flux/flux_model.h"

namespace titan::models::flux {

using StateDict = std::map<std::string, Tensor>;

// titan's (TorchTitan's) names -> Diffusers'. Every tensor of `config`'s
// model must be present; an unknown name is refused by name.
StateDict flux_to_diffusers(const StateDict& state, const FluxConfig& config);
// Diffusers' -> titan's; the same checks the other way.
StateDict flux_from_diffusers(const StateDict& diffusers, const FluxConfig& config);

// `folder`/diffusion_pytorch_model.safetensors: the model's weights in
// Diffusers' layout, written, or read into the model (shapes checked).
void save_diffusers_transformer(FluxModel& model, const std::string& folder);
void load_diffusers_transformer(FluxModel& model, const std::string& folder);

}  // namespace titan::models::flux
