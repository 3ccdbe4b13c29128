// Multi-head self-attention with grouped-query heads and rotary embeddings,
// and the variants Hugging Face families use: biases on q/k/v (Qwen 2) and
// on the output projection too, with attention sinks (gpt-oss),
// RMSNorm of queries and keys per head (Qwen 3, Gemma 3) or over the whole
// projection (OLMo 2), a custom score scale and logit soft-capping (Gemma 2),
// a per-layer sliding window and a second RoPE table for local layers
// (Gemma 3), scaleless q/k norms, a query scale and a sigmoid gate on the
// output before wo (Muse Glimmer). Which kernel computes attention ("flash" or "naive") is a config
// choice, not model code.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "titan/core/generator.h"
#include "titan/nn/linear.h"
#include "titan/nn/rms_norm.h"
#include "titan/ops/attention.h"
#include "titan/ops/rope.h"

namespace titan::nn {

class Attention;

struct AttentionConfig {
  int64_t dim = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // 0 = n_heads
  int64_t head_dim = 0;    // 0 = dim / n_heads
  bool qk_norm = false;    // RMSNorm queries and keys before RoPE
  // The q/k norms span the whole projection (all heads together, OLMo 2)
  // rather than each head; under tensor parallelism the plan gathers the heads.
  bool qk_norm_whole_projection = false;
  double qk_norm_weight_offset = 0.0;  // Gemma 3's norms scale by (1 + w)
  bool qk_norm_learnable = true;       // false: the q/k norms have no scale (Muse Glimmer)
  double norm_eps = 1e-6;
  bool qkv_bias = false;     // biases on the q, k and v projections (Qwen 2)
  bool output_bias = false;  // a bias on the output projection wo (gpt-oss)
  // The features of each head that rotate: the first rotary_dim (partial rotary, Phi-4-mini's
  // partial_rotary_factor); the rest pass through. 0 = the whole head.
  int64_t rotary_dim = 0;
  ops::RopeStyle rope_style = ops::RopeStyle::interleaved;
  bool rope = true;                      // rotate queries and keys (off: a NoPE layer)
  bool local_rope = false;               // rotate with the model's local table (Gemma 3's sliding layers)
  std::string attention_impl = "flash";  // "flash" or "naive"
  int64_t sliding_window = 0;            // 0 = the mask's own window
  double scale_dim = 0.0;                // scores scale by scale_dim^-1/2 (0: head_dim; Gemma: query_pre_attn_scalar)
  float logit_softcap = 0.0f;            // > 0: scores become cap * tanh(score / cap) (Gemma 2)
  // A learned logit per query head joins each row's softmax as a column with
  // no value (gpt-oss's attention sinks): Parameter "sinks" [n_heads] f32,
  // split with the heads under tensor parallelism (ops/attention.h).
  bool sinks = false;
  // Queries are multiplied by this after their norm, on top of the score scale
  // (Muse Glimmer's tuned 43.78 / sqrt(head_dim)); folded into the kernel's scale.
  double query_scale = 1.0;
  // The attention output is multiplied by sigmoid(o_gate(x)) before wo, o_gate
  // a [n_heads * head_dim, dim] projection of the layer's input (Muse Glimmer).
  bool output_gate = false;

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : dim / n_heads; }
  int64_t rotary_size() const { return rotary_dim > 0 ? rotary_dim : head_size(); }
  std::shared_ptr<Attention> build(Device device = Device::cpu()) const;
};

// What every layer's attention needs for one forward pass.
struct AttentionInputs {
  const ops::RopeTable* rope = nullptr;
  Tensor positions;                            // [B, S] i32/i64, or undefined for 0..S-1
  ops::AttentionMask mask;                     // causal / window / document ids
  const ops::RopeTable* local_rope = nullptr;  // for layers with local_rope (null: the model has none)
};

// Attention proper, from rotated q [B, S, Hq, D] and k, v [B, S, Hkv, D]: the
// config's kernel unless a parallelism installs its own (context parallelism's
// ring attention), as GroupedExperts takes a dispatcher.
using AttentionCore = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const ops::AttentionMask& mask, float scale)>;

class Attention : public Module {
 public:
  Attention(const AttentionConfig& config, Device device);
  // x [B, S, dim] -> [B, S, dim]
  Tensor forward(const Tensor& x, const AttentionInputs& inputs) const;
  // Incremental decoding: x holds T new tokens at positions [start, start + T)
  // (inputs.positions). Their keys and values are written into the caches
  // ([B, capacity, Hkv, head_dim]) and the queries attend to all start + T.
  Tensor forward_cached(const Tensor& x, const AttentionInputs& inputs, const Tensor& key_cache,
                        const Tensor& value_cache, int64_t start) const;
  // Init rules (nn::initialize draws them): q/k/v and the output gate N(0,
  // 0.02), the output projection N(0, output_std) (depth-scaled); q/k norms to one.
  void set_init(double output_std);
  // Replaces the kernel for training forwards (forward_cached, for decoding, keeps the kernel).
  void set_core(AttentionCore core) { core_ = std::move(core); }

  const AttentionConfig config;
  std::shared_ptr<Linear> wq, wk, wv, wo;
  std::shared_ptr<Linear> o_gate;           // null unless output_gate
  std::shared_ptr<RMSNorm> q_norm, k_norm;  // null unless qk_norm
  Parameter* sinks = nullptr;               // [n_heads] f32 sink logits; null unless config.sinks

 private:
  struct Projected {
    Tensor q, k, v;  // [B, S, heads, head_dim], normed and rotated
    Tensor gate;     // sigmoid(o_gate(x)) [B, S, heads * head_dim]; undefined without an output gate
  };
  Projected project(const Tensor& x, const AttentionInputs& inputs) const;
  Tensor attend(const Projected& p, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                const AttentionCore& core) const;

  AttentionCore core_;
};

}  // namespace titan::nn
