#include "titan/models/llama3/hf_family.h"

namespace titan::models::llama3 {

HfFamily hf_family() {
  HfFamily family;
  family.model = "llama3";
  family.architecture = "LlamaForCausalLM";
  family.model_type = "llama";
  family.rope_style = ops::RopeStyle::interleaved;
  family.qk_norm = false;
  // transformers' LlamaConfig defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 4096;
  d.intermediate_size = 11008;
  d.num_hidden_layers = 32;
  d.num_attention_heads = 32;
  d.vocab_size = 32000;
  d.max_position_embeddings = 2048;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  family.disabled_features = {"attention_bias", "mlp_bias"};
  return family;
}

}  // namespace titan::models::llama3
