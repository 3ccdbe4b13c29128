#include "titan/models/flux/text_encoder_config_json.h"

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/models/hf/config_json_reader.h"

namespace titan::models::flux {
namespace {

using json = nlohmann::json;

// A dimension above this is a corrupt file, not a model (and would overflow sizes).
constexpr int64_t kMaxDimension = int64_t{1} << 24;

json parse_object(std::string_view text, const std::string& source) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  TITAN_CHECK(root.is_object(), "{}: expected a JSON object at the top level, found {}", source, root.type_name());
  return root;
}

}  // namespace

T5EncoderConfig parse_t5_encoder_config(std::string_view json_text, const std::string& source) {
  const json root = parse_object(json_text, source);
  const ConfigJsonReader read(root, source);
  const auto string_or = [&](const char* key, const char* fallback) {
    return read.has(key) ? read.get_string(key) : std::string(fallback);
  };
  const std::string model_type = string_or("model_type", "t5");
  TITAN_CHECK(model_type == "t5", "{}: 'model_type' = '{}' is not a T5 encoder (expected \"t5\")", source, model_type);
  // T5 v1.1's feed-forward: GELU (tanh) gate times a linear unit. T5 1.0's
  // "relu" and other variants use another block.
  const std::string projection = string_or("feed_forward_proj", "relu");
  TITAN_CHECK(projection == "gated-gelu",
              "{}: 'feed_forward_proj' = '{}' is not supported (titan's T5 encoder is T5 v1.1's \"gated-gelu\")",
              source, projection);
  const std::string activation = string_or("dense_act_fn", "gelu_new");
  TITAN_CHECK(activation == "gelu_new" || activation == "gelu_pytorch_tanh",
              "{}: 'dense_act_fn' = '{}' is not supported (the tanh GELU, \"gelu_new\", is)", source, activation);
  // Hugging Face's T5Config defaults, where a file leaves a key out.
  T5EncoderConfig config{.vocab_size = 32128,
                         .d_model = 512,
                         .d_kv = 64,
                         .num_heads = 8,
                         .d_ff = 2048,
                         .num_layers = 6,
                         .relative_attention_num_buckets = 32,
                         .relative_attention_max_distance = 128,
                         .layer_norm_epsilon = 1e-6};
  read.get_positive("vocab_size", config.vocab_size, kMaxDimension);
  read.get_positive("d_model", config.d_model, kMaxDimension);
  read.get_positive("d_kv", config.d_kv, kMaxDimension);
  read.get_positive("num_heads", config.num_heads, kMaxDimension);
  read.get_positive("d_ff", config.d_ff, kMaxDimension);
  read.get_positive("num_layers", config.num_layers, kMaxDimension);
  read.get_positive("relative_attention_num_buckets", config.relative_attention_num_buckets, kMaxDimension);
  read.get_positive("relative_attention_max_distance", config.relative_attention_max_distance, kMaxDimension);
  read.get("layer_norm_epsilon", config.layer_norm_epsilon);
  try {
    config.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return config;
}

ClipTextConfig parse_clip_text_config(std::string_view json_text, const std::string& source) {
  const json root = parse_object(json_text, source);
  const ConfigJsonReader read(root, source);
  const auto string_or = [&](const char* key, const char* fallback) {
    return read.has(key) ? read.get_string(key) : std::string(fallback);
  };
  const std::string model_type = string_or("model_type", "clip_text_model");
  TITAN_CHECK(model_type == "clip_text_model",
              "{}: 'model_type' = '{}' is not a CLIP text model (expected \"clip_text_model\", CLIPTextModel's)",
              source, model_type);
  const std::string activation = string_or("hidden_act", "quick_gelu");
  TITAN_CHECK(activation == "quick_gelu", "{}: 'hidden_act' = '{}' is not supported (titan's CLIP uses \"quick_gelu\")",
              source, activation);
  // CLIPTextConfig's defaults, where a file leaves a key out.
  ClipTextConfig config{.vocab_size = 49408,
                        .hidden_size = 512,
                        .intermediate_size = 2048,
                        .num_hidden_layers = 12,
                        .num_attention_heads = 8,
                        .max_position_embeddings = 77,
                        .layer_norm_eps = 1e-5};
  read.get_positive("vocab_size", config.vocab_size, kMaxDimension);
  read.get_positive("hidden_size", config.hidden_size, kMaxDimension);
  read.get_positive("intermediate_size", config.intermediate_size, kMaxDimension);
  read.get_positive("num_hidden_layers", config.num_hidden_layers, kMaxDimension);
  read.get_positive("num_attention_heads", config.num_attention_heads, kMaxDimension);
  read.get_positive("max_position_embeddings", config.max_position_embeddings, kMaxDimension);
  read.get("layer_norm_eps", config.layer_norm_eps);
  // Pooling: titan takes the state at the largest id, the rule transformers
  // keeps for eos_token_id 2 (the original configs); with another eos id it
  // takes that id's first position, the same only when it is the largest id.
  if (read.has("eos_token_id")) {
    int64_t id = 0;
    read.get("eos_token_id", id, 0, kMaxDimension);
    TITAN_CHECK(id == 2 || id == config.vocab_size - 1,
                "{}: 'eos_token_id' = {} is not supported: titan pools at the largest id, which equals "
                "transformers' rule for eos_token_id 2 or vocab_size - 1 ({})",
                source, id, config.vocab_size - 1);
  }
  try {
    config.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return config;
}

}  // namespace titan::models::flux
