// The T5 v1.1 encoder's hyper-parameters (T5Config's names), apart from the
// module so that the config.json parser (text_encoder_config_json.h) and its
// fuzz target need no tensor code.
#pragma once

#include <cstdint>

namespace titan::models::flux {

// T5Config's names; the defaults are google/t5-v1_1-xxl's encoder.
struct T5EncoderConfig {
  int64_t vocab_size = 32128;
  int64_t d_model = 4096;
  int64_t d_kv = 64;
  int64_t num_heads = 64;
  int64_t d_ff = 10240;
  int64_t num_layers = 24;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  void validate() const;
};

}  // namespace titan::models::flux
