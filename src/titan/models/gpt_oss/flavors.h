// gpt-oss (OpenAI; TorchTitan's gpt_oss, Hugging Face's GptOssForCausalLM):
// a GQA decoder whose layers alternate a 128-token sliding window (even
// layers) and full attention, every layer with a learned attention sink per
// query head and biases on q/k/v/o, half-rotation RoPE with YaRN scaling,
// and a mixture of experts in every layer: a router with a bias, softmax
// weights over the top k logits, experts with biases and the clamped SwiGLU
// (nn::ExpertActivation::clamped_swiglu). Hugging Face interop: hf_family.h.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::gpt_oss {

// The hyper-parameters (GptOssConfig's names in the comments; the 120b model's values).
struct Args {
  int64_t dim = 2880;         // hidden_size
  int64_t n_layers = 36;      // num_hidden_layers
  int64_t n_heads = 64;       // num_attention_heads
  int64_t n_kv_heads = 8;     // num_key_value_heads
  int64_t head_dim = 64;      //
  int64_t hidden_dim = 2880;  // intermediate_size: each expert's FFN
  int64_t num_experts = 128;  // num_local_experts
  int64_t top_k = 4;          // num_experts_per_tok
  int64_t sliding_window = 128;
  int64_t vocab_size = 201088;
  double norm_eps = 1e-5;  // rms_norm_eps
  double rope_theta = 150000.0;
  // YaRN (rope_parameters): factor 32 over a 4096-token pre-training context,
  // the ramp's bounds not rounded (truncate false). factor <= 1: no scaling.
  double rope_factor = 32.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_seq_len = 4096;
  double swiglu_alpha = 1.702;
  double swiglu_limit = 7.0;
  // TorchTitan balances the experts with the aux-loss-free bias (no auxiliary loss).
  double load_balance_coeff = 1e-3;
  int64_t max_seq_len = 131072;  // max_position_embeddings
};

// Layer i slides when i is even (GptOssConfig's default layer_types).
bool is_sliding_layer(int64_t layer);
DecoderConfig to_config(const Args& args);
ModelSpec spec();

}  // namespace titan::models::gpt_oss
