// Qwen3.5 text decoders (TorchTitan's qwen3_5, without its vision encoder),
// dense and mixture-of-experts: a hybrid stack where every
// full_attention_interval-th layer (layer i with (i + 1) % 4 == 0) is full
// attention and the others are Gated DeltaNet linear attention
// (nn/gated_delta_net.h). The full-attention layers have a sigmoid output
// gate (TorchTitan and Hugging Face make it from the second half of each
// head's q_proj output; titan keeps it as the separate projection o_gate,
// the same function), zero-centred q/k norms (1 + w) and partial RoPE on the
// first rotary_dim features of each head (rotate-half pairs; the MRoPE
// sections coincide for text, whose three position ids are equal). Every
// norm of the model scales by 1 + w (w drawn as 0). The MoE flavors route
// with a softmax top-k renormalised and add one shared expert whose output a
// per-token sigmoid gate scales.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::qwen3_5 {

struct Args {
  int64_t dim = 1024;
  int64_t n_layers = 24;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 2;
  int64_t head_dim = 256;
  int64_t rotary_dim = 64;    // partial_rotary_factor 0.25
  int64_t hidden_dim = 3584;  // the dense FFN (dense flavors)
  // Mixture of experts (0 experts: dense); the shared expert is moe_hidden_dim wide.
  int64_t moe_hidden_dim = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  // Gated DeltaNet layers.
  int64_t n_key_heads = 16;
  int64_t n_value_heads = 16;
  int64_t key_head_dim = 128;
  int64_t value_head_dim = 128;
  int64_t conv_kernel_size = 4;
  int64_t full_attention_interval = 4;
  int64_t vocab_size = 248320;
  int64_t max_seq_len = 262144;
  double rope_theta = 10000000.0;
  double norm_eps = 1e-6;
};

// Whether layer `layer` is a full-attention layer (else Gated DeltaNet).
bool is_full_attention_layer(const Args& args, int64_t layer);

DecoderConfig to_config(const Args& args);
ModelSpec spec();

}  // namespace titan::models::qwen3_5
