#include "titan/models/decoder_size.h"

#include <algorithm>

namespace titan::models {
namespace {

int64_t attention_parameters(const nn::AttentionConfig& a) {
  const int64_t head = a.head_size();
  const int64_t q = a.n_heads * head, kv = a.kv_heads() * head;
  const int64_t norms = !a.qk_norm || !a.qk_norm_learnable ? 0 : a.qk_norm_whole_projection ? q + kv : 2 * head;
  const int64_t gate = a.output_gate ? a.dim * q : 0;  // o_gate
  const int64_t sinks = a.sinks ? a.n_heads : 0;       // one logit per query head (gpt-oss)
  return a.dim * (2 * q + 2 * kv) + gate + norms + (a.qkv_bias ? q + 2 * kv : 0) + (a.output_bias ? a.dim : 0) + sinks;
}

// Latent attention's projections and norms (nn/mla_attention.h).
int64_t latent_attention_parameters(const nn::TransformerBlockConfig& block) {
  const nn::MlaConfig& m = *block.mla;
  const int64_t dim = block.attention.dim, heads = block.attention.n_heads;
  const int64_t to_heads = heads * m.qk_head_dim();
  const int64_t q =
      m.q_lora_rank == 0 ? dim * to_heads : dim * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * to_heads;
  const int64_t kv = dim * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank +
                     m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
  return q + kv + heads * m.v_head_dim * dim;
}

// Gated DeltaNet's projections, convs, per-head A_log and dt_bias and output norm (nn/gated_delta_net.h).
int64_t linear_attention_parameters(const nn::GatedDeltaNetConfig& d) {
  const int64_t in =
      d.dim * (2 * d.key_dim() + d.value_dim() + 2 * d.n_value_heads) + (d.output_gate ? d.dim * d.value_dim() : 0);
  const int64_t conv = d.short_conv ? (2 * d.key_dim() + d.value_dim()) * d.conv_kernel_size : 0;
  return in + conv + 2 * d.n_value_heads + d.value_head_dim + d.value_dim() * d.dim;
}

int64_t block_norm_parameters(const nn::TransformerBlockConfig& block) {
  return block.attention.dim * ((block.pre_norms ? 2 : 0) + (block.post_norms ? 2 : 0));
}

// The block's FFN parameters: all of them, or those one token uses.
int64_t ffn_parameters(const nn::TransformerBlockConfig& block, bool active_only) {
  if (!block.moe) return 3 * block.attention.dim * block.feed_forward.hidden_dim;
  const nn::MoEConfig& moe = *block.moe;
  const int64_t shared = moe.num_shared_experts * 3 * moe.dim * moe.hidden_dim +
                         (moe.num_shared_experts > 0 && moe.shared_expert_gate ? moe.dim : 0);
  const int64_t expert = 3 * moe.dim * moe.hidden_dim + (moe.expert_biases ? 2 * moe.hidden_dim + moe.dim : 0);
  const int64_t experts = active_only ? moe.top_k : moe.num_experts;
  return moe.num_experts * (moe.dim + (moe.router_bias ? 1 : 0)) + experts * expert + shared;
}

int64_t count(const DecoderConfig& config, bool active_only) {
  int64_t layers = 0;
  const auto add_block = [&](const nn::TransformerBlockConfig& block) {
    const int64_t mixer = block.delta_net ? linear_attention_parameters(*block.delta_net)
                          : block.mla     ? latent_attention_parameters(block)
                                          : attention_parameters(block.attention);
    layers += mixer + ffn_parameters(block, active_only) + block_norm_parameters(block);
  };
  for (const nn::TransformerBlockConfig& block : config.layers) add_block(block);
  // Multi-token prediction depths: a block, eh_proj [dim, 2 dim] and three norms each.
  for (const nn::TransformerBlockConfig& block : config.mtp_layers) {
    add_block(block);
    layers += 2 * config.dim() * config.dim() + 3 * config.dim();
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
    if (block.delta_net) {
      // The recurrence's three Dk x Dv products per token and value head
      // (decay-and-read, write, query), as 6x their multiply-adds like the rest.
      const nn::GatedDeltaNetConfig& d = *block.delta_net;
      attention += 6.0 * 3.0 * static_cast<double>(d.n_value_heads * d.key_head_dim * d.value_head_dim);
      continue;
    }
    // TorchTitan's 12 * heads * head_dim * seq; a sliding window caps the keys a query sees.
    const int64_t keys =
        block.attention.sliding_window > 0 ? std::min(seq_len, block.attention.sliding_window) : seq_len;
    // Per head: q.k over the q/k head dim and p.v over the value head dim (both 2x head_dim without MLA).
    const int64_t head_dims =
        block.mla ? block.mla->qk_head_dim() + block.mla->v_head_dim : 2 * block.attention.head_size();
    attention += 6.0 * static_cast<double>(block.attention.n_heads * head_dims) * static_cast<double>(keys);
  }
  return 6.0 * matrices + attention;
}

}  // namespace titan::models
