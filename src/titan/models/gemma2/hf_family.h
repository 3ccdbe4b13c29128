// Gemma 2 <-> Hugging Face Gemma2ForCausalLM: norms before and after each sublayer
// (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
// post_feedforward_layernorm), all scaling by 1 + w; GeGLU; embeddings scaled
// by sqrt(hidden_size); query_pre_attn_scalar and the attention and final
// soft-caps; even layers slide, odd layers are global.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::gemma2 {

HfFamily hf_family();

}  // namespace titan::models::gemma2
