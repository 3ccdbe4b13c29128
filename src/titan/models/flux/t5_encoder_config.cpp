#include "titan/models/flux/t5_encoder_config.h"

#include "titan/core/error.h"

namespace titan::models::flux {

void T5EncoderConfig::validate() const {
  TITAN_CHECK(vocab_size > 0 && d_model > 0 && d_kv > 0 && num_heads > 0 && d_ff > 0 && num_layers > 0,
              "t5: vocab_size, d_model, d_kv, num_heads, d_ff and num_layers must be positive");
  TITAN_CHECK(relative_attention_num_buckets >= 4 && relative_attention_num_buckets % 2 == 0,
              "t5: relative_attention_num_buckets must be even and at least 4 (got {})",
              relative_attention_num_buckets);
  TITAN_CHECK(relative_attention_max_distance > relative_attention_num_buckets / 4,
              "t5: relative_attention_max_distance {} must exceed a quarter of the buckets",
              relative_attention_max_distance);
  TITAN_CHECK(layer_norm_epsilon > 0, "t5: layer_norm_epsilon must be positive");
}

}  // namespace titan::models::flux
