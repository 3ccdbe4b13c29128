#include "titan/models/deepseek_v3/flavors.h"

#include <cmath>
#include <map>

#include "titan/models/deepseek_v3/hf_family.h"

namespace titan::models::deepseek_v3 {

ops::RopeScaling rope_scaling(const Args& args) {
  ops::RopeScaling scaling;
  if (args.rope_factor <= 1.0) return scaling;
  // TorchTitan's YaRN: the ramp's bounds truncated, a pure rotation (mscale
  // and mscale_all_dim equal: attention factor 1), the mscale folded into the
  // softmax scale instead (nn::mla_softmax_scale).
  scaling.type = ops::RopeScalingType::yarn;
  scaling.factor = args.rope_factor;
  scaling.original_max_position = args.original_seq_len;
  scaling.beta_fast = args.beta_fast;
  scaling.beta_slow = args.beta_slow;
  scaling.mscale = args.mscale;
  scaling.mscale_all_dim = args.mscale;
  scaling.truncate = true;
  return scaling;
}

DecoderConfig to_config(const Args& args) {
  TITAN_CHECK(args.n_dense_layers >= 0 && args.n_dense_layers <= args.n_layers,
              "deepseek_v3: n_dense_layers {} must be in [0, n_layers {}]", args.n_dense_layers, args.n_layers);
  DecoderConfig config;
  config.vocab_size = args.vocab_size;
  for (int64_t i = 0; i < args.n_layers; ++i) {
    nn::TransformerBlockConfig block;
    // What the latent attention shares with any attention; head_dim is the rotated part (it sizes the RoPE table).
    block.attention = {.dim = args.dim,
                       .n_heads = args.n_heads,
                       .head_dim = args.qk_rope_head_dim,
                       .norm_eps = args.norm_eps,
                       .rope_style = ops::RopeStyle::interleaved};
    block.mla = nn::MlaConfig{
        .q_lora_rank = args.q_lora_rank,
        .kv_lora_rank = args.kv_lora_rank,
        .qk_nope_head_dim = args.qk_nope_head_dim,
        .qk_rope_head_dim = args.qk_rope_head_dim,
        .v_head_dim = args.v_head_dim,
        .softmax_scale = nn::mla_softmax_scale(args.qk_nope_head_dim + args.qk_rope_head_dim, rope_scaling(args))};
    block.norm_eps = args.norm_eps;
    if (i < args.n_dense_layers) {
      block.feed_forward = {.dim = args.dim, .hidden_dim = args.dense_hidden_dim};
    } else {
      block.moe = nn::MoEConfig{.dim = args.dim,
                                .hidden_dim = args.moe_hidden_dim,
                                .num_experts = args.num_experts,
                                .top_k = args.top_k,
                                .num_shared_experts = args.num_shared_experts,
                                .score = nn::parse_router_score(args.score),
                                .normalize_top_k = args.route_norm,
                                .route_scale = args.route_scale,
                                .num_expert_groups = args.num_expert_groups,
                                .num_limited_groups = args.num_limited_groups,
                                .load_balance_coeff = args.load_balance_coeff};
    }
    config.layers.push_back(block);
  }
  TITAN_CHECK(args.num_mtp_layers >= 0, "deepseek_v3: num_mtp_layers {} must be >= 0", args.num_mtp_layers);
  if (!config.layers.empty()) config.mtp_layers.assign(static_cast<size_t>(args.num_mtp_layers), config.layers.back());
  config.rope_theta = args.rope_theta;
  config.rope_scaling = rope_scaling(args);
  config.tie_embeddings = args.tie_embeddings;
  config.max_seq_len = args.max_seq_len;
  return config;
}

namespace {

Args debugmodel() {
  Args args;
  args.dim = 256;
  args.n_layers = 6;
  args.n_heads = 16;
  args.dense_hidden_dim = 1024;
  args.moe_hidden_dim = 256;
  args.num_experts = 8;
  args.top_k = 3;
  args.vocab_size = 2048;
  return args;
}

Args b236() {
  Args args;
  args.dim = 5120;
  args.n_layers = 60;
  args.n_heads = 128;
  args.q_lora_rank = 1536;
  args.dense_hidden_dim = 12288;
  args.moe_hidden_dim = 1536;
  args.num_experts = 160;
  args.num_expert_groups = 8;
  args.num_limited_groups = 3;
  args.route_scale = 16.0;
  args.mscale = 1.0;
  return args;
}

Args b671() {
  Args args;
  args.dim = 7168;
  args.n_layers = 61;
  args.n_dense_layers = 3;
  args.n_heads = 128;
  args.q_lora_rank = 1536;
  args.dense_hidden_dim = 18432;
  args.moe_hidden_dim = 2048;
  args.num_experts = 256;
  args.num_shared_experts = 1;
  args.top_k = 8;
  args.score = "sigmoid";
  args.num_expert_groups = 8;
  args.num_limited_groups = 4;
  args.route_scale = 2.5;
  args.route_norm = true;
  args.vocab_size = 129280;
  args.mscale = 1.0;
  return args;
}

// TorchTitan's flavors (torchtitan/models/deepseek_v3/__init__.py): the
// defaults are its 16B (Moonlight-16B-A3B's shape).
const std::map<std::string, Args>& flavors() {
  static const std::map<std::string, Args> table{
      {"debugmodel", debugmodel()},
      {"16B", {}},
      {"236B", b236()},
      {"671B", b671()},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_model_spec<Args>("deepseek_v3", flavors, to_config, hf_family); }

}  // namespace titan::models::deepseek_v3
