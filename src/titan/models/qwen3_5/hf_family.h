// Qwen3.5 <-> Hugging Face, in four config.json forms of one family: the
// text decoders Qwen3_5ForCausalLM (model_type qwen3_5_text) and
// Qwen3_5MoeForCausalLM (qwen3_5_moe_text), and the published multimodal
// checkpoints Qwen3_5ForConditionalGeneration (qwen3_5) and
// Qwen3_5MoeForConditionalGeneration (qwen3_5_moe), whose text_config holds
// the decoder and whose tensors sit under model.language_model. titan reads
// the language model only: the vision tower (model.visual.*) and the
// multi-token-prediction head (mtp.*) are skipped, and titan writes the text
// form. Layouts (HfFamily::gated_delta_net, joined_experts): q_proj holds per
// head the query rows then the output gate's (titan's wq and o_gate),
// in_proj_qkv and conv1d [channels, 1, kernel] hold q, k, v in that order,
// the experts are gate_up_proj [E, 2 * moe_intermediate_size, hidden] (gate
// rows, then up rows, per expert) and down_proj [E, hidden,
// moe_intermediate_size]; norms scale by 1 + w as titan's do (the Gated
// DeltaNet's output norm by w), so every value is stored as titan holds it.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::qwen3_5 {

HfFamily hf_family();

}  // namespace titan::models::qwen3_5
