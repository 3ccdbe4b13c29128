// Mistral (Mistral AI) <-> Hugging Face MistralForCausalLM: Llama's tensors, rotated
// by halves, with a sliding window on every layer when config.json sets one.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::mistral {

HfFamily hf_family();

}  // namespace titan::models::mistral
