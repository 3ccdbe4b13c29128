#include "titan/models/gpt_oss/flavors.h"

#include <map>

#include "titan/models/gpt_oss/hf_family.h"

namespace titan::models::gpt_oss {

bool is_sliding_layer(int64_t layer) { return layer % 2 == 0; }

DecoderConfig to_config(const Args& args) {
  DecoderConfig config;
  config.vocab_size = args.vocab_size;
  for (int64_t i = 0; i < args.n_layers; ++i) {
    nn::TransformerBlockConfig block;
    block.attention = {.dim = args.dim,
                       .n_heads = args.n_heads,
                       .n_kv_heads = args.n_kv_heads,
                       .head_dim = args.head_dim,
                       .norm_eps = args.norm_eps,
                       .qkv_bias = true,
                       .output_bias = true,
                       .rope_style = ops::RopeStyle::half,
                       .sliding_window = is_sliding_layer(i) ? args.sliding_window : 0,
                       .sinks = true};
    block.norm_eps = args.norm_eps;
    block.moe = nn::MoEConfig{.dim = args.dim,
                              .hidden_dim = args.hidden_dim,
                              .num_experts = args.num_experts,
                              .top_k = args.top_k,
                              // Softmax over the k best logits = the chosen softmax scores renormalised.
                              .score = nn::RouterScore::softmax,
                              .normalize_top_k = true,
                              .router_bias = true,
                              .expert_biases = true,
                              .activation = nn::ExpertActivation::clamped_swiglu,
                              .swiglu_alpha = args.swiglu_alpha,
                              .swiglu_limit = args.swiglu_limit,
                              .load_balance_coeff = args.load_balance_coeff};
    config.layers.push_back(block);
  }
  config.rope_theta = args.rope_theta;
  if (args.rope_factor > 1.0) {
    config.rope_scaling = {.type = ops::RopeScalingType::yarn,
                           .factor = args.rope_factor,
                           .original_max_position = args.original_max_seq_len,
                           .beta_fast = args.beta_fast,
                           .beta_slow = args.beta_slow,
                           .truncate = false};
  }
  config.tie_embeddings = false;
  config.max_seq_len = args.max_seq_len;
  return config;
}

namespace {

// TorchTitan's flavors (torchtitan/models/gpt_oss: debugmodel, 20b, 120b);
// 20b and 120b are the published gpt-oss-20b and gpt-oss-120b.
const std::map<std::string, Args>& flavors() {
  static const std::map<std::string, Args> table{
      {"debugmodel", {.dim = 256, .n_layers = 4, .num_experts = 8, .vocab_size = 2048}},
      {"20b", {.n_layers = 24, .num_experts = 32}},
      {"120b", {}},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_model_spec<Args>("gpt_oss", flavors, to_config, hf_family); }

}  // namespace titan::models::gpt_oss
