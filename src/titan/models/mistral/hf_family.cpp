#include "titan/models/mistral/hf_family.h"

namespace titan::models::mistral {

HfFamily hf_family() {
  HfFamily family;
  family.model = "mistral";
  family.architecture = "MistralForCausalLM";
  family.model_type = "mistral";
  family.rope_style = ops::RopeStyle::half;
  family.sliding = HfSlidingLayers::all;
  // transformers' MistralConfig defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 4096;
  d.intermediate_size = 14336;
  d.num_hidden_layers = 32;
  d.num_attention_heads = 32;
  d.num_key_value_heads = 8;
  d.head_dim = 0;  // None: hidden_size / num_attention_heads
  d.vocab_size = 32000;
  d.max_position_embeddings = 4096 * 32;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  d.sliding_window = 4096;
  return family;
}

}  // namespace titan::models::mistral
