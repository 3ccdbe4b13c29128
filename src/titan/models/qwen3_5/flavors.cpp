#include "titan/models/qwen3_5/flavors.h"

#include "titan/models/qwen3_5/hf_family.h"

#include <map>

namespace titan::models::qwen3_5 {

bool is_full_attention_layer(const Args& args, int64_t layer) {
  return (layer + 1) % args.full_attention_interval == 0;
}

DecoderConfig to_config(const Args& args) {
  TITAN_CHECK(args.dim > 0 && args.n_layers > 0 && args.n_heads > 0 && args.head_dim > 0,
              "qwen3_5: dim, n_layers, n_heads and head_dim must be positive");
  TITAN_CHECK(args.full_attention_interval >= 1, "qwen3_5: full_attention_interval {} must be >= 1",
              args.full_attention_interval);
  DecoderConfig config;
  config.vocab_size = args.vocab_size;
  for (int64_t i = 0; i < args.n_layers; ++i) {
    nn::TransformerBlockConfig block;
    block.attention = {.dim = args.dim,
                       .n_heads = args.n_heads,
                       .n_kv_heads = args.n_kv_heads,
                       .head_dim = args.head_dim,
                       .qk_norm = true,
                       .qk_norm_weight_offset = 1.0,
                       .norm_eps = args.norm_eps,
                       .rotary_dim = args.rotary_dim,
                       .rope_style = ops::RopeStyle::half,
                       .output_gate = true};
    if (!is_full_attention_layer(args, i)) {
      block.delta_net = nn::GatedDeltaNetConfig{.dim = args.dim,
                                                .n_key_heads = args.n_key_heads,
                                                .n_value_heads = args.n_value_heads,
                                                .key_head_dim = args.key_head_dim,
                                                .value_head_dim = args.value_head_dim,
                                                .conv_kernel_size = args.conv_kernel_size,
                                                .norm_eps = args.norm_eps};
    }
    if (args.num_experts > 0) {
      block.moe = nn::MoEConfig{.dim = args.dim,
                                .hidden_dim = args.moe_hidden_dim,
                                .num_experts = args.num_experts,
                                .top_k = args.top_k,
                                .num_shared_experts = 1,
                                .shared_expert_gate = true};
    } else {
      block.feed_forward = {.dim = args.dim, .hidden_dim = args.hidden_dim};
    }
    block.norm_eps = args.norm_eps;
    block.norm_weight_offset = 1.0;  // OffsetRMSNorm: 1 + w, w drawn as 0
    config.layers.push_back(block);
  }
  config.rope_theta = args.rope_theta;
  config.max_seq_len = args.max_seq_len;
  config.final_norm = nn::RMSNormConfig{.eps = args.norm_eps, .weight_offset = 1.0};
  return config;
}

namespace {

Args dense(int64_t dim, int64_t n_layers, int64_t n_heads, int64_t n_kv_heads, int64_t hidden_dim,
           int64_t n_value_heads) {
  return {.dim = dim,
          .n_layers = n_layers,
          .n_heads = n_heads,
          .n_kv_heads = n_kv_heads,
          .hidden_dim = hidden_dim,
          .n_value_heads = n_value_heads};
}

Args moe(int64_t dim, int64_t n_layers, int64_t n_heads, int64_t moe_hidden_dim, int64_t num_experts, int64_t top_k,
         int64_t n_value_heads) {
  return {.dim = dim,
          .n_layers = n_layers,
          .n_heads = n_heads,
          .n_kv_heads = 2,
          .hidden_dim = 0,
          .moe_hidden_dim = moe_hidden_dim,
          .num_experts = num_experts,
          .top_k = top_k,
          .n_value_heads = n_value_heads};
}

// TorchTitan's flavors (torchtitan/models/qwen3_5/__init__.py), text decoder
// only. The debug models keep TorchTitan's shapes but titan's debug
// vocabulary (2048, the test tokenizer's) instead of the full 248320.
const std::map<std::string, Args>& flavors() {
  static const std::map<std::string, Args> table{
      {"debugmodel",
       {.dim = 256,
        .n_layers = 8,
        .n_heads = 4,
        .n_kv_heads = 2,
        .head_dim = 64,
        .rotary_dim = 16,
        .hidden_dim = 512,
        .n_key_heads = 2,
        .n_value_heads = 4,
        .key_head_dim = 64,
        .value_head_dim = 64,
        .vocab_size = 2048,
        .max_seq_len = 4096}},
      {"debugmodel_moe",
       {.dim = 256,
        .n_layers = 4,
        .n_heads = 4,
        .n_kv_heads = 2,
        .head_dim = 64,
        .rotary_dim = 16,
        .hidden_dim = 0,
        .moe_hidden_dim = 256,
        .num_experts = 8,
        .top_k = 2,
        .n_key_heads = 2,
        .n_value_heads = 4,
        .key_head_dim = 64,
        .value_head_dim = 64,
        .vocab_size = 2048,
        .max_seq_len = 4096}},
      {"0.8B", dense(1024, 24, 8, 2, 3584, 16)},
      {"2B", dense(2048, 24, 8, 2, 6144, 16)},
      {"4B", dense(2560, 32, 16, 4, 9216, 32)},
      {"9B", dense(4096, 32, 16, 4, 12288, 32)},
      {"27B", dense(5120, 64, 24, 4, 17408, 48)},
      {"35B-A3B", moe(2048, 40, 16, 512, 256, 8, 32)},
      {"122B-A10B", moe(3072, 48, 32, 1024, 256, 8, 64)},
      {"397B-A17B", moe(4096, 60, 32, 1024, 512, 10, 64)},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_model_spec<Args>("qwen3_5", flavors, to_config, hf_family); }

}  // namespace titan::models::qwen3_5
