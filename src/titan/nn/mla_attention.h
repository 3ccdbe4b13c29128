// Multi-head latent attention (DeepSeek-V2/V3's MLA). Keys and values come
// from one low-rank latent per token: wkv_a maps x to a compressed kv of
// kv_lora_rank features plus one rotary key of qk_rope_head_dim shared by
// every head; the latent is RMS-normed and wkv_b expands it to each head's
// non-rotated key (qk_nope_head_dim) and value (v_head_dim). Queries are
// direct (wq) or low-rank too (wq_a, an RMSNorm, wq_b); each head's query and
// key are [nope | rope] features, RoPE turning only the rope part. So the q/k
// head dim (nope + rope) and the value head dim differ, and decoding caches
// the latent and the rotated shared key per position, not per-head keys and
// values: kv_lora_rank + qk_rope_head_dim numbers per token and layer.
//
// The block's AttentionConfig carries what MLA shares with ordinary
// attention: dim, n_heads, head_dim (the rotated dims, which size the model's
// RoPE table), rope_style, norm_eps and the kernel (attention_impl).
#pragma once

#include <memory>

#include "titan/nn/attention.h"

namespace titan::nn {

class MlaAttention;

struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: queries straight from x (wq)
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  // Scores scale by this (0: (qk_nope_head_dim + qk_rope_head_dim)^-1/2); YaRN
  // multiplies the default by mscale^2.
  double softmax_scale = 0.0;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  double scale() const;
  bool operator==(const MlaConfig&) const = default;
};

// DeepSeek's softmax scale: qk_head_dim^-1/2, times
// yarn_get_mscale(factor, mscale_all_dim)^2 when the RoPE is scaled and
// mscale_all_dim is set (TorchTitan's mscale), as transformers computes it.
double mla_softmax_scale(int64_t qk_head_dim, const ops::RopeScaling& scaling);

class MlaAttention : public Module {
 public:
  MlaAttention(const MlaConfig& config, const AttentionConfig& attention, Device device);
  // x [B, S, dim] -> [B, S, dim]
  Tensor forward(const Tensor& x, const AttentionInputs& inputs) const;
  // Incremental decoding: x holds T new tokens at positions [start, start + T).
  // Their normed latents go to latent_cache [B, capacity, kv_lora_rank] and
  // their rotated shared keys to rope_key_cache [B, capacity, qk_rope_head_dim];
  // the queries attend to the keys and values wkv_b makes of all start + T.
  Tensor forward_cached(const Tensor& x, const AttentionInputs& inputs, const Tensor& latent_cache,
                        const Tensor& rope_key_cache, int64_t start) const;
  // Init rules: every projection N(0, 0.02) but wo, N(0, output_std); norms to one.
  void set_init(double output_std);
  // Replaces the kernel for training forwards (context parallelism's ring attention).
  void set_core(AttentionCore core) { core_ = std::move(core); }

  const MlaConfig config;
  const AttentionConfig attention;
  std::shared_ptr<Linear> wq;          // null with a low-rank query
  std::shared_ptr<Linear> wq_a, wq_b;  // null with a direct query
  std::shared_ptr<RMSNorm> q_norm;     // null with a direct query
  std::shared_ptr<Linear> wkv_a, wkv_b, wo;
  std::shared_ptr<RMSNorm> kv_norm;

 private:
  struct Latent {
    Tensor kv;        // [B, S, kv_lora_rank], normed
    Tensor rope_key;  // [B, S, 1, qk_rope_head_dim], rotated
  };
  Tensor queries(const Tensor& x, const AttentionInputs& inputs) const;  // [B, S, heads, qk_head_dim]
  Latent latent(const Tensor& x, const AttentionInputs& inputs) const;
  // Every head's keys [B, T, heads, qk_head_dim] and values [B, T, heads, v_head_dim] of T latents.
  std::pair<Tensor, Tensor> keys_values(const Tensor& kv, const Tensor& rope_key) const;
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                const AttentionCore& core) const;
  const ops::RopeTable& table(const AttentionInputs& inputs) const;

  AttentionCore core_;
};

}  // namespace titan::nn
