// Gated DeltaNet linear attention (Qwen3.5's and Qwen3-Next's "linear
// attention" layers), in TorchTitan's qwen3_5 layout: separate projections
// in_proj_q, in_proj_k (key_dim = n_key_heads * key_head_dim), in_proj_v and
// in_proj_z (value_dim), in_proj_a and in_proj_b (one number per value head);
// q, k and v each pass a depthwise causal conv (kernel conv_kernel_size,
// SiLU) with weights conv_q, conv_k, conv_v [channels, kernel]; the gates are
// g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b); the gated
// delta rule (ops/delta_rule.h, q and k l2-normalised inside, value head h
// reading key head h / (Hv / Hk)) gives o per value head; o is RMS-normed per
// head (weight norm [value_head_dim], eps 1e-6), multiplied by silu(z), and
// out_proj maps it back to dim. No RoPE: order comes from the recurrence.
// Packed documents (the mask's document_ids) restart both the conv and the
// recurrent state.
#pragma once

#include <memory>

#include "titan/nn/attention.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"

namespace titan::nn {

class GatedDeltaNet;

struct GatedDeltaNetConfig {
  int64_t dim = 0;
  int64_t n_key_heads = 0;
  int64_t n_value_heads = 0;  // a multiple of n_key_heads
  int64_t key_head_dim = 128;
  int64_t value_head_dim = 128;
  int64_t conv_kernel_size = 4;
  double norm_eps = 1e-6;
  int64_t chunk_size = 64;  // the delta rule's chunk (ops::DeltaRuleOptions)
  // Switches for ablations and tests (both on in Qwen3.5): the short conv
  // (off: q, k, v straight from their projections, no conv params) and the
  // silu(z) output gate (off: the norm alone, no in_proj_z).
  bool short_conv = true;
  bool output_gate = true;

  int64_t key_dim() const { return n_key_heads * key_head_dim; }
  int64_t value_dim() const { return n_value_heads * value_head_dim; }
  // The pre-conv features one position caches for decoding: q | k | v.
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }
  bool operator==(const GatedDeltaNetConfig&) const = default;
  std::shared_ptr<GatedDeltaNet> build(Device device = Device::cpu()) const;
};

class GatedDeltaNet : public Module {
 public:
  GatedDeltaNet(const GatedDeltaNetConfig& config, Device device);
  // x [B, S, dim] -> [B, S, dim]; uses inputs.mask.document_ids only.
  Tensor forward(const Tensor& x, const AttentionInputs& inputs) const;
  // Incremental decoding: x holds T new tokens at positions [start, start + T).
  // Their pre-conv q | k | v projections go to conv_cache [B, capacity,
  // conv_channels()] (the conv reads the K - 1 positions before them from it);
  // state [B, Hv, Dk, Dv] f32 carries the recurrence and is updated in place.
  Tensor forward_cached(const Tensor& x, const Tensor& conv_cache, const Tensor& state, int64_t start) const;
  // Init rules (TorchTitan's qwen3_5): projections N(0, 0.02) cut at +-2,
  // out_proj at output_std; convs U(-1/sqrt(K), 1/sqrt(K)) (PyTorch's Conv1d
  // default); dt_bias and the norm weight ones; A_log uniform in
  // [log 0.01, log 16] (TorchTitan draws A uniform in [0.01, 16] and takes the
  // log: the same range, a different spread).
  void set_init(double output_std);
  // Tensor parallelism: this rank now holds 1 / ways of the key and value
  // heads (its projections, convs, A_log and dt_bias split by the plan in
  // models/parallelize_decoder.cpp); forward computes with the local counts.
  void split_heads(int64_t ways);
  int64_t local_key_heads() const { return config.n_key_heads / head_split_; }
  int64_t local_value_heads() const { return config.n_value_heads / head_split_; }

  const GatedDeltaNetConfig config;
  std::shared_ptr<Linear> in_proj_q, in_proj_k, in_proj_v, in_proj_a, in_proj_b, out_proj;
  std::shared_ptr<Linear> in_proj_z;  // null without output_gate
  // [key_dim, K], [key_dim, K], [value_dim, K]; null without short_conv.
  Parameter* conv_q = nullptr;
  Parameter* conv_k = nullptr;
  Parameter* conv_v = nullptr;
  Parameter* const a_log;    // "A_log" [n_value_heads] f32
  Parameter* const dt_bias;  // [n_value_heads] f32
  Parameter* const norm;     // "norm" [value_head_dim], the gated RMSNorm's weight

 private:
  int64_t head_split_ = 1;
  // norm(o) * silu(z(x)) through out_proj: o [B, T, Hv, Dv] -> [B, T, dim].
  Tensor output(const Tensor& x, const Tensor& o) const;
};

}  // namespace titan::nn
