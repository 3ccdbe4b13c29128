#include "titan/models/decoder_size.h"

namespace titan::models {
namespace {

int64_t attention_parameters(const nn::AttentionConfig& a) {
  const int64_t head = a.head_size();
  return a.dim * head * (2 * a.n_heads + 2 * a.kv_heads()) + (a.qk_norm ? 2 * head : 0);
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
    layers += attention_parameters(block.attention) + ffn_parameters(block, active_only) + 2 * block.attention.dim;
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
    attention += 12.0 * static_cast<double>(block.attention.n_heads * block.attention.head_size()) *
                 static_cast<double>(seq_len);
  }
  return 6.0 * matrices + attention;
}

}  // namespace titan::models
