// Qwen 2 / 2.5 <-> Hugging Face Qwen2ForCausalLM: Llama's tensors, rotated by halves,
// plus biases on the q, k and v projections (always there: Qwen2Config has
// no attention_bias key). Its sliding window (use_sliding_window) is not
// supported, so sliding_window and max_window_layers are inactive.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::qwen2 {

HfFamily hf_family();

}  // namespace titan::models::qwen2
