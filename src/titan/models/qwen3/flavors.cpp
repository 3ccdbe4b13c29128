#include "titan/models/qwen3/flavors.h"

#include <map>

#include "titan/models/qwen3/hf_family.h"

namespace titan::models::qwen3 {

nn::AttentionConfig attention_config(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                     double norm_eps) {
  return {.dim = dim,
          .n_heads = n_heads,
          .n_kv_heads = n_kv_heads,
          .head_dim = head_dim,
          .qk_norm = true,
          .norm_eps = norm_eps,
          .rope_style = ops::RopeStyle::half};
}

DecoderConfig to_config(const Args& args) {
  DecoderConfig config;
  config.vocab_size = args.vocab_size;
  nn::TransformerBlockConfig block;
  block.attention = attention_config(args.dim, args.n_heads, args.n_kv_heads, args.head_dim, args.norm_eps);
  block.feed_forward = {.dim = args.dim, .hidden_dim = args.hidden_dim};
  block.norm_eps = args.norm_eps;
  config.set_layers(args.n_layers, block);
  config.rope_theta = args.rope_theta;
  config.tie_embeddings = args.tie_embeddings;
  config.max_seq_len = args.max_seq_len;
  return config;
}

namespace {

// Published configurations (the config.json of each Qwen3 release).
const std::map<std::string, Args>& flavors() {
  static const std::map<std::string, Args> table{
      {"debugmodel",
       {.dim = 256,
        .n_layers = 6,
        .n_heads = 8,
        .n_kv_heads = 4,
        .head_dim = 32,
        .hidden_dim = 768,
        .vocab_size = 2048,
        .max_seq_len = 2048}},
      {"0.6B", {.dim = 1024, .n_layers = 28, .n_heads = 16, .n_kv_heads = 8, .hidden_dim = 3072}},
      {"1.7B", {.dim = 2048, .n_layers = 28, .n_heads = 16, .n_kv_heads = 8, .hidden_dim = 6144}},
      {"4B", {.dim = 2560, .n_layers = 36, .n_heads = 32, .n_kv_heads = 8, .hidden_dim = 9728}},
      {"8B",
       {.dim = 4096, .n_layers = 36, .n_heads = 32, .n_kv_heads = 8, .hidden_dim = 12288, .tie_embeddings = false}},
      {"14B",
       {.dim = 5120, .n_layers = 40, .n_heads = 40, .n_kv_heads = 8, .hidden_dim = 17408, .tie_embeddings = false}},
      {"32B",
       {.dim = 5120, .n_layers = 64, .n_heads = 64, .n_kv_heads = 8, .hidden_dim = 25600, .tie_embeddings = false}},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_model_spec<Args>("qwen3", flavors, to_config, hf_family); }

}  // namespace titan::models::qwen3
