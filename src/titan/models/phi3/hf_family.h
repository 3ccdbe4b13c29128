// Phi-3 (Microsoft) <-> Hugging Face Phi3ForCausalLM: Llama's maths with q, k and v in
// one tensor (self_attn.qkv_proj: q rows, then k, then v) and gate and up in
// another (mlp.gate_up_proj: gate rows, then up); titan keeps them apart and
// the HF folder code splits and joins rows. A window on every layer when
// sliding_window is set; partial rotary and long-context RoPE are refused.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::phi3 {

HfFamily hf_family();

}  // namespace titan::models::phi3
