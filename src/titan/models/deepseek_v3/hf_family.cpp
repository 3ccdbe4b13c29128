#include "titan/models/deepseek_v3/hf_family.h"

namespace titan::models::deepseek_v3 {

HfFamily hf_family() {
  HfFamily family;
  family.model = "deepseek_v3";
  family.architecture = "DeepseekV3ForCausalLM";
  family.model_type = "deepseek_v3";
  family.rope_style = ops::RopeStyle::interleaved;
  family.mixture_of_experts = true;
  family.latent_attention = true;
  // transformers' DeepseekV3Config defaults (DeepSeek-V3's own shape), for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 7168;
  d.intermediate_size = 18432;
  d.num_hidden_layers = 61;
  d.num_attention_heads = 128;
  d.num_key_value_heads = 128;
  d.vocab_size = 129280;
  d.max_position_embeddings = 4096;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  d.num_experts = 256;  // n_routed_experts
  d.num_experts_per_tok = 8;
  d.moe_intermediate_size = 2048;
  d.norm_topk_prob = true;
  d.mla = HfLatentAttention{};
  family.disabled_features = {"attention_bias"};
  return family;
}

}  // namespace titan::models::deepseek_v3
