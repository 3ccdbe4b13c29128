// Qwen 3 mixture-of-experts models (Alibaba): the dense Qwen 3 attention
// (q/k RMSNorm, head_dim 128, half-rotation RoPE with theta 1e6) with
// mixture-of-experts FFNs: softmax router, top-k of many small SwiGLU
// experts, optionally renormalised weights, dense FFN layers where
// mlp_only_layers or decoder_sparse_step say so.
#pragma once

#include <vector>

#include "titan/models/model_spec.h"

namespace titan::models::qwen3_moe {

// The published hyper-parameters, as their config.json names them.
struct Args {
  int64_t dim = 2048;      // hidden_size
  int64_t n_layers = 48;   // num_hidden_layers
  int64_t n_heads = 32;    // num_attention_heads
  int64_t n_kv_heads = 4;  // num_key_value_heads
  int64_t head_dim = 128;
  int64_t hidden_dim = 6144;     // intermediate_size: the dense layers' FFN
  int64_t moe_hidden_dim = 768;  // moe_intermediate_size: each expert's FFN
  int64_t num_experts = 128;
  int64_t top_k = 8;  // num_experts_per_tok
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  int64_t vocab_size = 151936;
  double norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  bool tie_embeddings = false;
  int64_t max_seq_len = 40960;
};

// Layer i is a mixture of experts unless listed in mlp_only_layers, or
// (i + 1) is not a multiple of decoder_sparse_step (Hugging Face's rule).
bool is_moe_layer(const Args& args, int64_t layer);
DecoderConfig to_config(const Args& args);
ModelSpec spec();

}  // namespace titan::models::qwen3_moe
