#include "titan/nn/attention.h"

#include <cmath>

#include "titan/core/copy.h"
#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<Attention> AttentionConfig::build(Device device) const {
  return std::make_shared<Attention>(*this, device);
}

Attention::Attention(const AttentionConfig& config, Device device) : config(config) {
  TITAN_CHECK(config.dim > 0 && config.n_heads > 0, "Attention: dim and n_heads must be positive");
  TITAN_CHECK(config.head_dim > 0 || config.dim % config.n_heads == 0,
              "Attention: dim {} is not divisible by n_heads {}", config.dim, config.n_heads);
  TITAN_CHECK(config.n_heads % config.kv_heads() == 0, "Attention: n_heads {} is not a multiple of n_kv_heads {}",
              config.n_heads, config.kv_heads());
  F::parse_attention_impl(config.attention_impl);  // fail early on a bad name
  TITAN_CHECK(config.rotary_dim >= 0 && config.rotary_dim % 2 == 0 && config.rotary_dim <= config.head_size(),
              "Attention: rotary_dim {} must be even and at most the head size {}", config.rotary_dim,
              config.head_size());
  const int64_t head = config.head_size();
  const int64_t q_width = config.n_heads * head, kv_width = config.kv_heads() * head;
  wq = register_module("wq", LinearConfig{config.dim, q_width, config.qkv_bias}.build(device));
  wk = register_module("wk", LinearConfig{config.dim, kv_width, config.qkv_bias}.build(device));
  wv = register_module("wv", LinearConfig{config.dim, kv_width, config.qkv_bias}.build(device));
  wo = register_module("wo", LinearConfig{q_width, config.dim, config.output_bias}.build(device));
  // f32 whatever the compute dtype: the kernels fold it into f32 log-sum-exps.
  if (config.sinks) sinks = register_parameter("sinks", Tensor::empty({config.n_heads}, DType::f32, device));
  if (config.qk_norm) {
    const bool whole = config.qk_norm_whole_projection;
    const auto norm = [&](int64_t width) {
      return RMSNormConfig{width, config.norm_eps, config.qk_norm_weight_offset, config.qk_norm_learnable}.build(
          device);
    };
    q_norm = register_module("q_norm", norm(whole ? q_width : head));
    k_norm = register_module("k_norm", norm(whole ? kv_width : head));
  }
  if (config.output_gate) o_gate = register_module("o_gate", LinearConfig{config.dim, q_width}.build(device));
}

Attention::Projected Attention::project(const Tensor& x, const AttentionInputs& inputs) const {
  TITAN_CHECK(x.dim() == 3 && x.size(2) == config.dim, "Attention: input {} must be [B, S, {}]", shape_str(x.shape()),
              config.dim);
  const ops::RopeTable* table = config.local_rope ? inputs.local_rope : inputs.rope;
  TITAN_CHECK(!config.rope || table != nullptr, "Attention: no {}RoPE table given", config.local_rope ? "local " : "");
  TITAN_CHECK(!config.rope || table->cos.size(1) * 2 == config.rotary_size(),
              "Attention: a RoPE table for {} features given to a layer that rotates {}", table->cos.size(1) * 2,
              config.rotary_size());
  const int64_t batch = x.size(0), seq = x.size(1), head = config.head_size();
  Tensor q = wq->forward(x), k = wk->forward(x);
  if (config.qk_norm && config.qk_norm_whole_projection) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  // Heads as -1: under tensor parallelism a rank holds only some of them.
  // Reshape, not view: there a whole-projection norm's output is this rank's
  // narrow slice of the gathered features, not contiguous (a view elsewhere).
  q = F::reshape(q, {batch, seq, -1, head});
  k = F::reshape(k, {batch, seq, -1, head});
  Tensor v = F::view(wv->forward(x), {batch, seq, -1, head});
  if (config.qk_norm && !config.qk_norm_whole_projection) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  if (config.rope) {
    q = F::rope(q, *table, inputs.positions, config.rope_style);
    k = F::rope(k, *table, inputs.positions, config.rope_style);
  }
  // The gate, from the same input: column-parallel like wq, so a rank's gates match its heads.
  const Tensor gate = o_gate ? F::sigmoid(o_gate->forward(x)) : Tensor();
  return {q, k, v, gate};
}

Tensor Attention::attend(const Projected& p, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                         const AttentionCore& core) const {
  ops::AttentionMask effective = mask;
  if (config.sliding_window > 0) effective.sliding_window = config.sliding_window;
  effective.logit_softcap = config.logit_softcap;
  const double scale_dim = config.scale_dim > 0 ? config.scale_dim : static_cast<double>(config.head_size());
  // The query scale commutes with RoPE and the dot product: one multiply, in the kernel.
  const float scale = static_cast<float>(config.query_scale / std::sqrt(scale_dim));
  // Back to f32 where mixed precision or a bf16 model made it narrower: the op takes f32 sinks.
  if (sinks) effective.sinks = F::cast(sinks->materialize(), DType::f32);
  const Tensor out = core ? core(p.q, k, v, effective, scale)
                          : F::scaled_dot_product_attention(p.q, k, v, effective, scale,
                                                            F::parse_attention_impl(config.attention_impl));
  const Tensor merged = F::view(out, {p.q.size(0), p.q.size(1), -1});
  return wo->forward(p.gate.defined() ? F::mul(merged, p.gate) : merged);
}

Tensor Attention::forward(const Tensor& x, const AttentionInputs& inputs) const {
  const ForwardScope scope(*this);
  const Projected p = project(pre_forward(x), inputs);
  return post_forward(attend(p, p.k, p.v, inputs.mask, core_));
}

Tensor Attention::forward_cached(const Tensor& x, const AttentionInputs& inputs, const Tensor& key_cache,
                                 const Tensor& value_cache, int64_t start) const {
  const ForwardScope scope(*this);
  // Through the hooks, as forward: a parallel plan's redistributions apply to decoding too.
  const Projected p = project(pre_forward(x), inputs);
  const int64_t end = start + x.size(1);
  TITAN_CHECK(end <= key_cache.size(1), "Attention: KV cache of {} positions cannot hold position {}",
              key_cache.size(1), end - 1);
  titan::copy_(key_cache.narrow(1, start, x.size(1)), p.k);
  titan::copy_(value_cache.narrow(1, start, x.size(1)), p.v);
  // The queries sit at the end of the visible keys: causal masking aligns them there.
  return post_forward(attend(p, key_cache.narrow(1, 0, end), value_cache.narrow(1, 0, end), inputs.mask, nullptr));
}

void Attention::set_init(double output_std) {
  for (const auto& projection : {wq, wk, wv}) projection->set_init(0.02);  // biases zero
  if (o_gate) o_gate->set_init(0.02);
  // TorchTitan's gpt_oss: a truncated normal with the depth-scaled std of the output projection.
  if (sinks) sinks->init = InitRule::truncated_normal(0.0, output_std, -2.0, 2.0);
  wo->set_init(output_std);
}

}  // namespace titan::nn
