#include "titan/models/gpt_oss/hf_family.h"

namespace titan::models::gpt_oss {

HfFamily hf_family() {
  HfFamily family;
  family.model = "gpt_oss";
  family.architecture = "GptOssForCausalLM";
  family.model_type = "gpt_oss";
  family.rope_style = ops::RopeStyle::half;
  family.qkv_bias = true;
  family.stacked_experts = true;
  family.sliding = HfSlidingLayers::even;
  family.writes_layer_types = true;  // as the published config.json
  // transformers' GptOssConfig defaults (gpt-oss-120b), for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 2880;
  d.intermediate_size = 2880;
  d.num_hidden_layers = 36;
  d.num_attention_heads = 64;
  d.num_key_value_heads = 8;
  d.head_dim = 64;
  d.vocab_size = 201088;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1e-5;
  d.rope_theta = 150000.0;
  d.rope_scaling = {.type = ops::RopeScalingType::yarn,
                    .factor = 32.0,
                    .original_max_position = 4096,
                    .beta_fast = 32.0,
                    .beta_slow = 1.0,
                    .truncate = false};
  d.tie_word_embeddings = false;
  d.num_experts = 128;
  d.num_experts_per_tok = 4;
  d.router_aux_loss_coef = 0.001;
  d.sliding_window = 128;
  d.swiglu_alpha = 1.702;
  d.swiglu_limit = 7.0;
  return family;
}

}  // namespace titan::models::gpt_oss
