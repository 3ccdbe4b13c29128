#include "titan/models/olmo2/hf_family.h"

namespace titan::models::olmo2 {

HfFamily hf_family() {
  HfFamily family;
  family.model = "olmo2";
  family.architecture = "Olmo2ForCausalLM";
  family.model_type = "olmo2";
  family.rope_style = ops::RopeStyle::half;
  family.qk_norm = true;
  family.qk_norm_whole_projection = true;
  family.norms = HfNorms::post;
  // transformers' Olmo2Config defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 4096;
  d.intermediate_size = 11008;
  d.num_hidden_layers = 32;
  d.num_attention_heads = 32;
  d.num_key_value_heads = 0;  // None: num_attention_heads
  d.head_dim = 0;
  d.vocab_size = 50304;
  d.max_position_embeddings = 2048;
  d.rms_norm_eps = 1e-5;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  family.disabled_features = {"attention_bias"};
  return family;
}

}  // namespace titan::models::olmo2
