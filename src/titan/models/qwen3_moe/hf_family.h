// Qwen 3 MoE <-> Hugging Face Qwen3MoeForCausalLM. Names and layouts follow
// Qwen 3 (half rotation, so no q/k permutation); each MoE layer's experts,
// stacked in one titan tensor per projection, are one HF tensor per expert
// (the shared mapping is in models/hf/hf_decoder_config.h).
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::qwen3_moe {

HfFamily hf_family();

}  // namespace titan::models::qwen3_moe
