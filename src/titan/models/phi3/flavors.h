// Phi-3 (Microsoft): Llama's block with sliding-window attention; Hugging
// Face stores q/k/v as one qkv_proj and gate/up as one gate_up_proj, which
// its adapter splits into titan's projections and fuses back.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::phi3 {

ModelSpec spec();

}  // namespace titan::models::phi3
