#include "titan/models/qwen3/hf_family.h"

namespace titan::models::qwen3 {

HfFamily hf_family() {
  HfFamily family;
  family.model = "qwen3";
  family.architecture = "Qwen3ForCausalLM";
  family.model_type = "qwen3";
  family.rope_style = ops::RopeStyle::half;
  family.qk_norm = true;
  // transformers' Qwen3Config defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 4096;
  d.intermediate_size = 22016;
  d.num_hidden_layers = 32;
  d.num_attention_heads = 32;
  d.num_key_value_heads = 32;
  d.head_dim = 128;
  d.vocab_size = 151936;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  family.disabled_features = {"attention_bias", "use_sliding_window"};
  return family;
}

}  // namespace titan::models::qwen3
