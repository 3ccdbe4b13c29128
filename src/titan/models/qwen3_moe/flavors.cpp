#include "titan/models/qwen3_moe/flavors.h"

#include <algorithm>
#include <map>

#include "titan/models/qwen3/flavors.h"
#include "titan/models/qwen3_moe/hf_family.h"

namespace titan::models::qwen3_moe {

bool is_moe_layer(const Args& args, int64_t layer) {
  const bool dense_only =
      std::find(args.mlp_only_layers.begin(), args.mlp_only_layers.end(), layer) != args.mlp_only_layers.end();
  return !dense_only && args.num_experts > 0 && (layer + 1) % args.decoder_sparse_step == 0;
}

DecoderConfig to_config(const Args& args) {
  TITAN_CHECK(args.decoder_sparse_step >= 1, "qwen3_moe: decoder_sparse_step {} must be >= 1",
              args.decoder_sparse_step);
  DecoderConfig config;
  config.vocab_size = args.vocab_size;
  for (int64_t i = 0; i < args.n_layers; ++i) {
    nn::TransformerBlockConfig block;
    block.attention = qwen3::attention_config(args.dim, args.n_heads, args.n_kv_heads, args.head_dim, args.norm_eps);
    block.norm_eps = args.norm_eps;
    if (is_moe_layer(args, i)) {
      block.moe = nn::MoEConfig{.dim = args.dim,
                                .hidden_dim = args.moe_hidden_dim,
                                .num_experts = args.num_experts,
                                .top_k = args.top_k,
                                .normalize_top_k = args.norm_topk_prob,
                                .aux_loss_coef = args.router_aux_loss_coef};
    } else {
      block.feed_forward = {.dim = args.dim, .hidden_dim = args.hidden_dim};
    }
    config.layers.push_back(block);
  }
  config.rope_theta = args.rope_theta;
  config.tie_embeddings = args.tie_embeddings;
  config.max_seq_len = args.max_seq_len;
  return config;
}

namespace {

Args qwen3_235b() {
  Args args;  // Qwen3-30B-A3B's, but for these
  args.dim = 4096;
  args.n_layers = 94;
  args.n_heads = 64;
  args.hidden_dim = 12288;
  args.moe_hidden_dim = 1536;
  return args;
}

// Published configurations (the config.json of Qwen3-30B-A3B and
// Qwen3-235B-A22B), and a debug model with the same structure that trains on
// the fortunes corpus in about the time of the dense debug job: as many
// active FFN parameters per token as qwen3's debugmodel, a dense first layer.
const std::map<std::string, Args>& flavors() {
  static const std::map<std::string, Args> table{
      {"debugmodel",
       {.dim = 256,
        .n_layers = 6,
        .n_heads = 8,
        .n_kv_heads = 4,
        .head_dim = 32,
        .hidden_dim = 768,
        .moe_hidden_dim = 384,
        .num_experts = 8,
        .top_k = 2,
        .mlp_only_layers = {0},
        .router_aux_loss_coef = 0.01,
        .vocab_size = 2048,
        .max_seq_len = 2048}},
      // TorchTitan's debug MoE (torchtitan/models/qwen3, debugmodel_moe): every layer routed.
      {"debugmodel_moe",
       {.dim = 256,
        .n_layers = 8,
        .n_heads = 16,
        .n_kv_heads = 8,
        .head_dim = 128,
        .hidden_dim = 768,
        .moe_hidden_dim = 768,
        .num_experts = 64,
        .top_k = 8,
        .mlp_only_layers = {},
        .vocab_size = 2048,
        .max_seq_len = 4096}},
      {"30B-A3B", {}},
      {"235B-A22B", qwen3_235b()},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_model_spec<Args>("qwen3_moe", flavors, to_config, hf_family); }

}  // namespace titan::models::qwen3_moe
