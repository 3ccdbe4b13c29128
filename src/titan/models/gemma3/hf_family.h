// Gemma 3 (text) <-> Hugging Face Gemma3ForCausalLM (model_type gemma3_text): Gemma 2's
// block and tensors plus per-head q/k norms (self_attn.q_norm / k_norm, 1 + w);
// layer i is global iff (i + 1) % sliding_window_pattern == 0, the others
// slide and rotate with rope_local_base_freq; soft-caps only when set.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::gemma3 {

HfFamily hf_family();

}  // namespace titan::models::gemma3
