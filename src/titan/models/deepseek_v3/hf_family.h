// DeepSeek-V3 <-> Hugging Face DeepseekV3ForCausalLM. HF's rope_interleave
// rotates the rotary dims in interleaved pairs as titan does, so no row of
// any tensor is permuted; each MoE layer's stacked experts are one HF tensor
// per expert, as for Qwen3-MoE.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::deepseek_v3 {

HfFamily hf_family();

}  // namespace titan::models::deepseek_v3
