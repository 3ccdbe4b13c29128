#include "titan/models/qwen3_moe/hf_family.h"

namespace titan::models::qwen3_moe {

HfFamily hf_family() {
  HfFamily family;
  family.model = "qwen3_moe";
  family.architecture = "Qwen3MoeForCausalLM";
  family.model_type = "qwen3_moe";
  family.rope_style = ops::RopeStyle::half;
  family.qk_norm = true;
  family.mixture_of_experts = true;
  // transformers' Qwen3MoeConfig defaults, for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 2048;
  d.intermediate_size = 6144;
  d.num_hidden_layers = 24;
  d.num_attention_heads = 32;
  d.num_key_value_heads = 4;
  d.head_dim = 0;  // hidden_size / num_attention_heads, as the modeling code falls back to
  d.vocab_size = 151936;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  d.num_experts = 128;
  d.num_experts_per_tok = 8;
  d.moe_intermediate_size = 768;
  d.norm_topk_prob = false;
  d.decoder_sparse_step = 1;
  d.router_aux_loss_coef = 0.001;
  d.output_router_logits = false;
  family.disabled_features = {"attention_bias", "use_sliding_window"};
  return family;
}

}  // namespace titan::models::qwen3_moe
