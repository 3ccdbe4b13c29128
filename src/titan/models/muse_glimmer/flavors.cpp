#include "titan/models/muse_glimmer/flavors.h"

#include "titan/models/muse_glimmer/hf_family.h"

#include <cmath>
#include <map>

namespace titan::models::muse_glimmer {

bool layer_uses_rope(int64_t layer, int64_t n_layers) { return (n_layers - layer - 1) % kNopeEvery != 0; }

int64_t layer_window(int64_t layer, int64_t n_layers, const std::vector<int64_t>& pattern) {
  TITAN_CHECK(!pattern.empty(), "muse_glimmer: the window pattern is empty");
  const int64_t phase = layer + kNopeEvery - n_layers % kNopeEvery;
  return pattern[static_cast<size_t>(phase % static_cast<int64_t>(pattern.size()))];
}

DecoderConfig to_config(const Args& args) {
  TITAN_CHECK(args.dim > 0 && args.n_layers > 0 && args.n_heads > 0 && args.head_dim > 0,
              "muse_glimmer: dim, n_layers, n_heads and head_dim must be positive");
  DecoderConfig config;
  config.vocab_size = args.vocab_size;
  for (int64_t i = 0; i < args.n_layers; ++i) {
    nn::TransformerBlockConfig block;
    block.attention = {.dim = args.dim,
                       .n_heads = args.n_heads,
                       .n_kv_heads = args.n_kv_heads,
                       .head_dim = args.head_dim,
                       .qk_norm = true,
                       .qk_norm_learnable = false,
                       .norm_eps = kNormEps,
                       .rope_style = ops::RopeStyle::interleaved,  // TorchTitan's complex RoPE pairs neighbours
                       .rope = layer_uses_rope(i, args.n_layers),
                       .sliding_window = layer_window(i, args.n_layers, args.window_pattern),
                       .query_scale = kQueryScaleNumerator / std::sqrt(static_cast<double>(args.head_dim)),
                       .output_gate = true};
    block.feed_forward = {.dim = args.dim, .hidden_dim = static_cast<int64_t>(kFfnMultiplier * args.dim)};
    block.norm_eps = kNormEps;
    block.post_norm_eps = kPostNormEps;
    block.norm_weight_offset = 1.0;  // gain-centred: 1 + w, w drawn as 0
    block.post_norms = true;
    config.layers.push_back(block);
  }
  config.rope_theta = kRopeTheta;
  config.max_seq_len = args.max_seq_len;
  config.embedding_norm_eps = kNormEps;
  config.final_norm = nn::RMSNormConfig{.eps = kNormEps, .weight_offset = 0.0, .initial_scale = 0.0};
  config.output_multiplier = args.output_multiplier;
  config.loss.softcap = kOutputSoftcap;
  return config;
}

namespace {

// TorchTitan's flavors (torchtitan/models/muse_glimmer/__init__.py), text only.
const std::map<std::string, Args>& flavors() {
  static const std::map<std::string, Args> table{
      {"debugmodel",
       {.dim = 256,
        .n_layers = 8,
        .n_heads = 4,
        .n_kv_heads = 2,
        .head_dim = 64,
        .vocab_size = 2048,
        .max_seq_len = 4096,
        .window_pattern = {128, 128, 128, 0},
        .output_multiplier = 1.0}},
      {"30B", {}},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_model_spec<Args>("muse_glimmer", flavors, to_config, hf_family); }

}  // namespace titan::models::muse_glimmer
