#include "titan/models/flux/clip_text_config.h"

#include "titan/core/error.h"

namespace titan::models::flux {

void ClipTextConfig::validate() const {
  TITAN_CHECK(vocab_size > 0 && hidden_size > 0 && intermediate_size > 0 && num_hidden_layers > 0 &&
                  max_position_embeddings > 0,
              "clip: vocab_size, hidden_size, intermediate_size, num_hidden_layers and max_position_embeddings must "
              "be positive");
  TITAN_CHECK(num_attention_heads > 0 && hidden_size % num_attention_heads == 0,
              "clip: hidden_size {} must be a multiple of num_attention_heads {}", hidden_size, num_attention_heads);
  TITAN_CHECK(layer_norm_eps > 0, "clip: layer_norm_eps must be positive");
}

}  // namespace titan::models::flux
