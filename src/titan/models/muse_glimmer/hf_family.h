// Muse Glimmer <-> Hugging Face MuseGlimmerForConditionalGeneration, the
// multimodal model transformers defines (it has no text-only causal LM):
// config.json keeps the decoder's keys in text_config (model_type
// muse_glimmer_text), its tensors sit under model.language_model. with
// lm_head.weight at the top, and the vision tower's tensors
// (model.vision_tower., model.vision_adapter., model.vision_projection.) are
// skipped on reading: titan trains the text decoder. The attention output
// gate is self_attn.gate_proj; q/k rows are permuted per head between
// titan's neighbouring RoPE pairs and transformers' halves (every layer, as
// TorchTitan's adapter does); the (1 + w) norms are stored as w on both sides.
#pragma once

#include "titan/models/hf/hf_config.h"

namespace titan::models::muse_glimmer {

HfFamily hf_family();

}  // namespace titan::models::muse_glimmer
