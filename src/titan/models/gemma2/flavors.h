// Gemma 2 (Google): GeGLU, (1 + w) RMSNorm before and after attention and
// the MLP, sqrt(hidden)-scaled embeddings, sliding-window attention on even
// layers, query_pre_attn_scalar, attention and final logits soft-capped.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::gemma2 {

ModelSpec spec();

}  // namespace titan::models::gemma2
