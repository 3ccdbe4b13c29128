// Qwen 3 dense models (Alibaba): per-head q/k RMSNorm, explicit head_dim 128,
// half-rotation RoPE with theta 1e6, tied embeddings up to 4B.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::qwen3 {

struct Args {
  int64_t dim = 1024;
  int64_t n_layers = 28;
  int64_t n_heads = 16;
  int64_t n_kv_heads = 8;
  int64_t head_dim = 128;
  int64_t hidden_dim = 3072;
  int64_t vocab_size = 151936;
  double norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  bool tie_embeddings = true;
  int64_t max_seq_len = 40960;
};

DecoderConfig to_config(const Args& args);
ModelSpec spec();
// Qwen 3's attention (dense and MoE models alike): q/k norms, half-rotation RoPE.
nn::AttentionConfig attention_config(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                     double norm_eps);

}  // namespace titan::models::qwen3
