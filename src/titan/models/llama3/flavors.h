// Llama 3 / 3.1 / 3.2 (Meta): the published sizes, as TorchTitan names them.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::llama3 {

// Llama's hyper-parameters as Meta publishes them; the FFN width is derived.
struct Args {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;  // 0 = n_heads
  int64_t vocab_size = 128256;
  int64_t multiple_of = 256;
  double ffn_dim_multiplier = 0.0;  // 0 = none
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  double rope_scaling_factor = 0.0;  // Llama 3.1: 8, Llama 3.2: 32
  bool tie_embeddings = false;
  int64_t max_seq_len = 131072;
};

// hidden = 2/3 * 4 * dim, times the multiplier, rounded up to multiple_of.
int64_t ffn_hidden_dim(const Args& args);
DecoderConfig to_config(const Args& args);
ModelSpec spec();

}  // namespace titan::models::llama3
