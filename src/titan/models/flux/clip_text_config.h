// The CLIP text encoder's hyper-parameters (CLIPTextConfig's names), apart
// from the module so that the config.json parser (text_encoder_config_json.h)
// and its fuzz target need no tensor code.
#pragma once

#include <cstdint>

namespace titan::models::flux {

// CLIPTextConfig's names; the defaults are openai/clip-vit-large-patch14's.
struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t max_position_embeddings = 77;
  double layer_norm_eps = 1e-5;
  void validate() const;
};

}  // namespace titan::models::flux
