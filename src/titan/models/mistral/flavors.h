// Mistral (Mistral AI): Llama's block with sliding-window attention where the
// config sets a window (7B v0.1), and explicit head_dim in the larger models.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::mistral {

ModelSpec spec();

}  // namespace titan::models::mistral
