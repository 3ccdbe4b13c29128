#include "titan/nn/mla_attention.h"

#include <cmath>

#include "titan/core/copy.h"
#include "titan/nn/functional.h"

namespace titan::nn {

double MlaConfig::scale() const {
  return softmax_scale > 0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
}

double mla_softmax_scale(int64_t qk_head_dim, const ops::RopeScaling& scaling) {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim));
  if (scaling.type != ops::RopeScalingType::none && scaling.mscale_all_dim > 0) {
    const double m = ops::yarn_get_mscale(scaling.factor, scaling.mscale_all_dim);
    scale = scale * m * m;
  }
  return scale;
}

MlaAttention::MlaAttention(const MlaConfig& config, const AttentionConfig& attention, Device device)
    : config(config), attention(attention) {
  TITAN_CHECK(attention.dim > 0 && attention.n_heads > 0, "MlaAttention: dim and n_heads must be positive");
  TITAN_CHECK(config.q_lora_rank >= 0 && config.kv_lora_rank > 0 && config.qk_nope_head_dim >= 0 &&
                  config.qk_rope_head_dim > 0 && config.qk_rope_head_dim % 2 == 0 && config.v_head_dim > 0,
              "MlaAttention: needs q_lora_rank >= 0 ({}), kv_lora_rank > 0 ({}), qk_nope_head_dim >= 0 ({}), an even "
              "qk_rope_head_dim > 0 ({}) and v_head_dim > 0 ({})",
              config.q_lora_rank, config.kv_lora_rank, config.qk_nope_head_dim, config.qk_rope_head_dim,
              config.v_head_dim);
  TITAN_CHECK(!attention.rope || attention.head_size() == config.qk_rope_head_dim,
              "MlaAttention: the block's attention head_dim {} must be qk_rope_head_dim {} (it sizes the RoPE table)",
              attention.head_size(), config.qk_rope_head_dim);
  F::parse_attention_impl(attention.attention_impl);
  const int64_t dim = attention.dim, heads = attention.n_heads;
  if (config.q_lora_rank == 0) {
    wq = register_module("wq", LinearConfig{dim, heads * config.qk_head_dim()}.build(device));
  } else {
    wq_a = register_module("wq_a", LinearConfig{dim, config.q_lora_rank}.build(device));
    q_norm = register_module("q_norm", RMSNormConfig{config.q_lora_rank, attention.norm_eps}.build(device));
    wq_b = register_module("wq_b", LinearConfig{config.q_lora_rank, heads * config.qk_head_dim()}.build(device));
  }
  wkv_a = register_module("wkv_a", LinearConfig{dim, config.kv_lora_rank + config.qk_rope_head_dim}.build(device));
  kv_norm = register_module("kv_norm", RMSNormConfig{config.kv_lora_rank, attention.norm_eps}.build(device));
  wkv_b = register_module(
      "wkv_b", LinearConfig{config.kv_lora_rank, heads * (config.qk_nope_head_dim + config.v_head_dim)}.build(device));
  wo = register_module("wo", LinearConfig{heads * config.v_head_dim, dim}.build(device));
}

const ops::RopeTable& MlaAttention::table(const AttentionInputs& inputs) const {
  TITAN_CHECK(inputs.rope != nullptr, "MlaAttention: no RoPE table given");
  return *inputs.rope;
}

Tensor MlaAttention::queries(const Tensor& x, const AttentionInputs& inputs) const {
  TITAN_CHECK(x.dim() == 3 && x.size(2) == attention.dim, "MlaAttention: input {} must be [B, S, {}]",
              shape_str(x.shape()), attention.dim);
  const Tensor projected = wq ? wq->forward(x) : wq_b->forward(q_norm->forward(wq_a->forward(x)));
  // Heads as -1: under tensor parallelism a rank holds only some of them.
  const Tensor q = F::view(projected, {x.size(0), x.size(1), -1, config.qk_head_dim()});
  Tensor rotated = F::contiguous(F::narrow(q, 3, config.qk_nope_head_dim, config.qk_rope_head_dim));
  if (attention.rope) rotated = F::rope(rotated, table(inputs), inputs.positions, attention.rope_style);
  if (config.qk_nope_head_dim == 0) return rotated;
  return F::concat(F::narrow(q, 3, 0, config.qk_nope_head_dim), rotated, 3);
}

MlaAttention::Latent MlaAttention::latent(const Tensor& x, const AttentionInputs& inputs) const {
  const int64_t batch = x.size(0), seq = x.size(1);
  const Tensor both = wkv_a->forward(x);
  Latent latent;
  latent.kv = kv_norm->forward(F::contiguous(F::narrow(both, 2, 0, config.kv_lora_rank)));
  latent.rope_key = F::view(F::contiguous(F::narrow(both, 2, config.kv_lora_rank, config.qk_rope_head_dim)),
                            {batch, seq, 1, config.qk_rope_head_dim});
  if (attention.rope) latent.rope_key = F::rope(latent.rope_key, table(inputs), inputs.positions, attention.rope_style);
  return latent;
}

std::pair<Tensor, Tensor> MlaAttention::keys_values(const Tensor& kv, const Tensor& rope_key) const {
  const int64_t batch = kv.size(0), seq = kv.size(1);
  const Tensor expanded = F::view(wkv_b->forward(kv), {batch, seq, -1, config.qk_nope_head_dim + config.v_head_dim});
  const int64_t heads = expanded.size(2);
  const Tensor v = F::contiguous(F::narrow(expanded, 3, config.qk_nope_head_dim, config.v_head_dim));
  // The one rotated key is every head's: broadcast, its gradient summed back over the heads.
  const Tensor shared = F::expand(rope_key, {batch, seq, heads, config.qk_rope_head_dim});
  if (config.qk_nope_head_dim == 0) return {F::contiguous(shared), v};
  return {F::concat(F::narrow(expanded, 3, 0, config.qk_nope_head_dim), shared, 3), v};
}

Tensor MlaAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                            const AttentionCore& core) const {
  const float scale = static_cast<float>(config.scale());
  // The kernels (and ring attention) take a value head dim other than the q/k one.
  const Tensor out =
      core ? core(q, k, v, mask, scale)
           : F::scaled_dot_product_attention(q, k, v, mask, scale, F::parse_attention_impl(attention.attention_impl));
  return wo->forward(F::reshape(out, {q.size(0), q.size(1), -1}));
}

Tensor MlaAttention::forward(const Tensor& input, const AttentionInputs& inputs) const {
  const ForwardScope scope(*this);
  const Tensor x = pre_forward(input);
  const Tensor q = queries(x, inputs);
  const Latent l = latent(x, inputs);
  const auto [k, v] = keys_values(l.kv, l.rope_key);
  return post_forward(attend(q, k, v, inputs.mask, core_));
}

Tensor MlaAttention::forward_cached(const Tensor& input, const AttentionInputs& inputs, const Tensor& latent_cache,
                                    const Tensor& rope_key_cache, int64_t start) const {
  const ForwardScope scope(*this);
  const Tensor x = pre_forward(input);
  const int64_t batch = x.size(0), tokens = x.size(1), end = start + tokens;
  TITAN_CHECK(latent_cache.dim() == 3 && latent_cache.size(2) == config.kv_lora_rank && rope_key_cache.dim() == 3 &&
                  rope_key_cache.size(2) == config.qk_rope_head_dim,
              "MlaAttention: the caches {} and {} must be [B, capacity, {}] and [B, capacity, {}]",
              shape_str(latent_cache.shape()), shape_str(rope_key_cache.shape()), config.kv_lora_rank,
              config.qk_rope_head_dim);
  TITAN_CHECK(end <= latent_cache.size(1), "MlaAttention: KV cache of {} positions cannot hold position {}",
              latent_cache.size(1), end - 1);
  const Tensor q = queries(x, inputs);
  const Latent l = latent(x, inputs);
  titan::copy_(latent_cache.narrow(1, start, tokens), l.kv);
  titan::copy_(rope_key_cache.narrow(1, start, tokens), l.rope_key.reshape({batch, tokens, config.qk_rope_head_dim}));
  // Every head's keys and values of the whole prefix, expanded from the cached latents.
  const auto [k, v] = keys_values(latent_cache.narrow(1, 0, end).contiguous(),
                                  rope_key_cache.narrow(1, 0, end).contiguous().unsqueeze(2));
  return post_forward(attend(q, k, v, inputs.mask, nullptr));
}

void MlaAttention::set_init(double output_std) {
  for (const auto& projection : {wq, wq_a, wq_b, wkv_a, wkv_b}) {
    if (projection) projection->set_init(0.02);
  }
  wo->set_init(output_std);
}

}  // namespace titan::nn
