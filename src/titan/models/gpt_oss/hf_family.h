// gpt-oss <-> Hugging Face GptOssForCausalLM: q/k/v/o with biases, sinks
// (self_attn.sinks), the router with a bias (mlp.router), and the experts as
// one tensor per projection: gate_up_proj [E, hidden, 2 * intermediate] whose
// even columns are titan's w1 (gate) and odd ones w3 (up), transposed, and
// down_proj [E, intermediate, hidden] (w2 transposed), each with its bias
// (HfFamily::stacked_experts). The published MXFP4 experts (blocks + scales)
// are decoded on load.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::gpt_oss {

HfFamily hf_family();

}  // namespace titan::models::gpt_oss
