// Qwen 2 / 2.5 (Alibaba): Llama's block with biases on the q, k and v
// projections, half-rotation RoPE with theta 1e6, tied embeddings up to 3B.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::qwen2 {

ModelSpec spec();

}  // namespace titan::models::qwen2
