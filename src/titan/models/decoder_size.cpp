#include "titan/models/decoder_size.h"

#include <algorithm>

namespace titan::models {
namespace {

int64_t attention_parameters(const nn::AttentionConfig& a) {
  const int64_t head = a.head_size();
  const int64_t q = a.n_heads * head, kv = a.kv_heads() * head;
  const int64_t norms = !a.qk_norm ? 0 : a.qk_norm_whole_projection ? q + kv : 2 * head;
  return a.dim * (2 * q + 2 * kv) + norms + (a.qkv_bias ? q + 2 * kv : 0);
}

int64_t block_norm_parameters(const nn::TransformerBlockConfig& block) {
  return block.attention.dim * ((block.pre_norms ? 2 : 0) + (block.post_norms ? 2 : 0));
}

// The block's FFN parameters: all of them, or those one token uses.
int64_t ffn_parameters(const nn::TransformerBlockConfig& block, bool active_only) {
  if (!block.moe) return 3 * block.attention.dim * block.feed_forward.hidden_dim;
  const nn::MoEConfig& moe = *block.moe;
  const int64_t expert = 3 * moe.dim * moe.hidden_dim;
  const int64_t experts = active_only ? moe.top_k : moe.num_experts;
  return moe.num_experts * moe.dim + experts * expert + moe.num_shared_experts * expert;
}

int64_t count(const DecoderConfig& config, bool active_only) {
  int64_t layers = 0;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    layers += attention_parameters(block.attention) + ffn_parameters(block, active_only) + block_norm_parameters(block);
  }
  const int64_t embeddings = config.vocab_size * config.dim();
  return embeddings * (config.tie_embeddings ? 1 : 2) + layers + config.dim();
}

}  // namespace

int64_t parameter_count(const DecoderConfig& config) { return count(config, false); }
int64_t active_parameter_count(const DecoderConfig& config) { return count(config, true); }

double training_flops_per_token(const DecoderConfig& config, int64_t seq_len) {
  const double matrices = static_cast<double>(active_parameter_count(config) - config.vocab_size * config.dim());
  double attention = 0.0;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    // TorchTitan's 12 * heads * head_dim * seq; a sliding window caps the keys a query sees.
    const int64_t keys =
        block.attention.sliding_window > 0 ? std::min(seq_len, block.attention.sliding_window) : seq_len;
    attention +=
        12.0 * static_cast<double>(block.attention.n_heads * block.attention.head_size()) * static_cast<double>(keys);
  }
  return 6.0 * matrices + attention;
}

}  // namespace titan::models
