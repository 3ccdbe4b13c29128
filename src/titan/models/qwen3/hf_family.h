// Qwen 3 <-> Hugging Face Qwen3ForCausalLM. Both rotate halves, so tensors
// only change names; q/k norms map to self_attn.q_norm / k_norm (the shared
// mapping is in models/hf/hf_decoder_config.h).
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::qwen3 {

HfFamily hf_family();

}  // namespace titan::models::qwen3
