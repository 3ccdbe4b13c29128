#include "titan/models/llama3/flavors.h"

#include <map>

#include "titan/models/llama3/hf_family.h"

namespace titan::models::llama3 {

int64_t ffn_hidden_dim(const Args& args) {
  auto hidden = static_cast<int64_t>(2 * 4 * args.dim / 3);
  if (args.ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(args.ffn_dim_multiplier * static_cast<double>(hidden));
  return (hidden + args.multiple_of - 1) / args.multiple_of * args.multiple_of;
}

DecoderConfig to_config(const Args& args) {
  DecoderConfig config;
  config.vocab_size = args.vocab_size;
  nn::TransformerBlockConfig block;
  block.attention = {.dim = args.dim,
                     .n_heads = args.n_heads,
                     .n_kv_heads = args.n_kv_heads,
                     .norm_eps = args.norm_eps,
                     .rope_style = ops::RopeStyle::interleaved};
  block.feed_forward = {.dim = args.dim, .hidden_dim = ffn_hidden_dim(args)};
  block.norm_eps = args.norm_eps;
  config.set_layers(args.n_layers, block);
  config.rope_theta = args.rope_theta;
  if (args.rope_scaling_factor > 0) {
    config.rope_scaling = {.type = ops::RopeScalingType::llama3,
                           .factor = args.rope_scaling_factor,
                           .original_max_position = 8192,
                           .low_freq_factor = 1.0,
                           .high_freq_factor = 4.0};
  }
  config.tie_embeddings = args.tie_embeddings;
  config.max_seq_len = args.max_seq_len;
  return config;
}

namespace {

// Published configurations (Meta's params.json for Llama 3.1 and 3.2).
const std::map<std::string, Args>& flavors() {
  static const std::map<std::string, Args> table{
      {"debugmodel", {.dim = 256, .n_layers = 6, .n_heads = 16, .vocab_size = 2048, .max_seq_len = 2048}},
      {"1B",
       {.dim = 2048,
        .n_layers = 16,
        .n_heads = 32,
        .n_kv_heads = 8,
        .ffn_dim_multiplier = 1.5,
        .rope_scaling_factor = 32.0,
        .tie_embeddings = true}},
      {"3B",
       {.dim = 3072,
        .n_layers = 28,
        .n_heads = 24,
        .n_kv_heads = 8,
        .ffn_dim_multiplier = 1.0,
        .rope_scaling_factor = 32.0,
        .tie_embeddings = true}},
      {"8B",
       {.dim = 4096,
        .n_layers = 32,
        .n_heads = 32,
        .n_kv_heads = 8,
        .multiple_of = 1024,
        .ffn_dim_multiplier = 1.3,
        .rope_scaling_factor = 8.0}},
      {"70B",
       {.dim = 8192,
        .n_layers = 80,
        .n_heads = 64,
        .n_kv_heads = 8,
        .multiple_of = 4096,
        .ffn_dim_multiplier = 1.3,
        .rope_scaling_factor = 8.0}},
      {"405B",
       {.dim = 16384,
        .n_layers = 126,
        .n_heads = 128,
        .n_kv_heads = 8,
        .multiple_of = 4096,
        .ffn_dim_multiplier = 1.2,
        .rope_scaling_factor = 8.0}},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_model_spec<Args>("llama3", flavors, to_config, hf_family); }

}  // namespace titan::models::llama3
