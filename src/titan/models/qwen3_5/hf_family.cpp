#include "titan/models/qwen3_5/hf_family.h"

namespace titan::models::qwen3_5 {

namespace hf_forms {

// Qwen3_5TextConfig's fields (and Qwen3-Next-style names of the same
// choices, which are checked): the only keys a text config may hold, with
// PreTrainedConfig's own. mtp_* describe the multi-token-prediction head,
// whose tensors titan skips.
std::vector<std::string> text_keys() {
  return {"vocab_size",
          "hidden_size",
          "intermediate_size",
          "num_hidden_layers",
          "num_attention_heads",
          "num_key_value_heads",
          "head_dim",
          "hidden_act",
          "max_position_embeddings",
          "rms_norm_eps",
          "rope_parameters",
          "rope_theta",
          "rope_scaling",
          "partial_rotary_factor",
          "attention_bias",
          "attention_dropout",
          "linear_conv_kernel_dim",
          "linear_key_head_dim",
          "linear_value_head_dim",
          "linear_num_key_heads",
          "linear_num_value_heads",
          "layer_types",
          "full_attention_interval",
          "attn_output_gate",
          "mamba_ssm_dtype",
          "mtp_num_hidden_layers",
          "mtp_use_dedicated_embeddings"};
}

HfFamily dense() {
  HfFamily family;
  family.model = "qwen3_5";
  family.architecture = "Qwen3_5ForCausalLM";
  family.model_type = "qwen3_5_text";
  family.rope_style = ops::RopeStyle::half;
  family.qk_norm = true;
  family.partial_rotary = true;
  family.norm_weight_offset = 1.0;
  family.gated_delta_net = true;
  family.writes_rope_parameters = true;
  family.disabled_features = {"attention_bias"};
  family.skipped_tensor_prefixes = {"mtp.", "model.visual."};
  family.known_keys = text_keys();
  // Qwen3_5TextConfig's defaults (Qwen3.5-9B's shape), for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 4096;
  d.intermediate_size = 12288;
  d.num_hidden_layers = 32;
  d.num_attention_heads = 16;
  d.num_key_value_heads = 4;
  d.head_dim = 256;
  d.vocab_size = 248320;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  d.rope_theta = 10000.0;  // transformers' default without rope_parameters; published files set 10000000
  d.partial_rotary_factor = 0.25;
  d.tie_word_embeddings = false;
  d.linear_attention = HfLinearAttention{};
  return family;
}

HfFamily moe() {
  HfFamily family = dense();
  family.architecture = "Qwen3_5MoeForCausalLM";
  family.model_type = "qwen3_5_moe_text";
  family.joined_experts = true;
  for (const char* key :
       {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
        "router_aux_loss_coef", "output_router_logits", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"}) {
    family.known_keys.emplace_back(key);
  }
  // Qwen3_5MoeTextConfig's defaults (Qwen3.5-35B-A3B's shape).
  HfConfig& d = family.defaults;
  d.hidden_size = 2048;
  d.intermediate_size = 0;
  d.num_hidden_layers = 40;
  d.num_attention_heads = 16;
  d.num_key_value_heads = 2;
  d.num_experts = 256;
  d.num_experts_per_tok = 8;
  d.moe_intermediate_size = 512;
  d.norm_topk_prob = true;
  d.router_aux_loss_coef = 0.001;
  d.linear_attention->shared_expert_intermediate_size = 512;
  return family;
}

// The multimodal checkpoint of a text form: its decoder keys in text_config, its tensors under model.language_model.
HfFamily multimodal(HfFamily text, const char* architecture, const char* model_type) {
  text.text_model_type = text.model_type;
  text.architecture = architecture;
  text.model_type = model_type;
  text.weights_prefix = "model.language_model.";
  return text;
}

}  // namespace hf_forms

HfFamily hf_family() {
  HfFamily family = hf_forms::dense();
  family.other_forms = {hf_forms::moe(),
                        hf_forms::multimodal(hf_forms::dense(), "Qwen3_5ForConditionalGeneration", "qwen3_5"),
                        hf_forms::multimodal(hf_forms::moe(), "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe")};
  return family;
}

}  // namespace titan::models::qwen3_5
