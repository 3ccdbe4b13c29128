#include "titan/models/gemma2/hf_family.h"

namespace titan::models::gemma2 {

HfFamily hf_family() {
  HfFamily family;
  family.model = "gemma2";
  family.architecture = "Gemma2ForCausalLM";
  family.model_type = "gemma2";
  family.rope_style = ops::RopeStyle::half;
  family.norms = HfNorms::pre_and_post;
  family.sliding = HfSlidingLayers::even;
  family.norm_weight_offset = 1.0;
  family.scaled_embeddings = true;
  family.activation = HfActivation::gelu_pytorch_tanh;
  family.activation_key = "hidden_activation";
  family.score_scale_and_softcaps = true;
  family.writes_layer_types = true;
  // transformers' Gemma2Config defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 2304;
  d.intermediate_size = 9216;
  d.num_hidden_layers = 26;
  d.num_attention_heads = 8;
  d.num_key_value_heads = 4;
  d.head_dim = 256;
  d.vocab_size = 256000;
  d.max_position_embeddings = 8192;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = true;
  d.sliding_window = 4096;
  d.query_pre_attn_scalar = 256;
  d.attn_logit_softcapping = 50.0;
  d.final_logit_softcapping = 30.0;
  family.disabled_features = {"attention_bias"};
  return family;
}

}  // namespace titan::models::gemma2
