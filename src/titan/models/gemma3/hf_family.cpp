#include "titan/models/gemma3/hf_family.h"

namespace titan::models::gemma3 {

HfFamily hf_family() {
  HfFamily family;
  family.model = "gemma3";
  family.architecture = "Gemma3ForCausalLM";
  family.model_type = "gemma3_text";
  family.rope_style = ops::RopeStyle::half;
  family.qk_norm = true;
  family.norms = HfNorms::pre_and_post;
  family.sliding = HfSlidingLayers::pattern;
  family.norm_weight_offset = 1.0;
  family.scaled_embeddings = true;
  family.activation = HfActivation::gelu_pytorch_tanh;
  family.activation_key = "hidden_activation";
  family.score_scale_and_softcaps = true;
  family.writes_layer_types = true;
  family.local_rope = true;
  // transformers' Gemma3TextConfig defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 2304;
  d.intermediate_size = 9216;
  d.num_hidden_layers = 26;
  d.num_attention_heads = 8;
  d.num_key_value_heads = 4;
  d.head_dim = 256;
  d.vocab_size = 262208;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 1000000.0;
  d.tie_word_embeddings = true;
  d.sliding_window = 4096;
  d.sliding_window_pattern = 6;
  d.query_pre_attn_scalar = 256;
  d.attn_logit_softcapping = 0.0;   // None
  d.final_logit_softcapping = 0.0;  // None
  d.rope_local_base_freq = 10000.0;
  family.disabled_features = {"attention_bias", "use_bidirectional_attention"};
  return family;
}

}  // namespace titan::models::gemma3
