#include "titan/models/phi3/hf_family.h"

namespace titan::models::phi3 {

HfFamily hf_family() {
  HfFamily family;
  family.model = "phi3";
  family.architecture = "Phi3ForCausalLM";
  family.model_type = "phi3";
  family.rope_style = ops::RopeStyle::half;
  family.fused_projections = true;
  family.sliding = HfSlidingLayers::all;
  family.partial_rotary = true;                   // Phi-4-mini: partial_rotary_factor 0.75
  family.top_level_original_max_position = true;  // Phi-3.5's longrope
  // transformers' Phi3Config defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 3072;
  d.intermediate_size = 8192;
  d.num_hidden_layers = 32;
  d.num_attention_heads = 32;
  d.num_key_value_heads = 0;  // None: num_attention_heads
  d.head_dim = 0;
  d.vocab_size = 32064;
  d.max_position_embeddings = 4096;
  d.rms_norm_eps = 1e-5;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  d.sliding_window = 0;  // None
  return family;
}

}  // namespace titan::models::phi3
