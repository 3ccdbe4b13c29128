// Llama 3 <-> Hugging Face LlamaForCausalLM. titan's Llama rotates interleaved
// pairs as Meta's code does, so q/k projections are stored row-permuted in HF
// files (the shared mapping is in models/hf/hf_decoder_config.h).
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::llama3 {

HfFamily hf_family();

}  // namespace titan::models::llama3
