// OLMo 2 (Ai2) <-> Hugging Face Olmo2ForCausalLM: norms only after each sublayer
// (post_attention_layernorm, post_feedforward_layernorm) and q/k norms over
// the whole q and k projections (self_attn.q_norm [heads x head_dim]).
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::olmo2 {

HfFamily hf_family();

}  // namespace titan::models::olmo2
