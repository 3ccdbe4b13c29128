#include "titan/models/qwen2/flavors.h"

#include <map>

#include "titan/models/qwen2/hf_family.h"

namespace titan::models::qwen2 {

namespace {

// Each flavor is the config.json of a release (Qwen/Qwen2.5-*),
// trimmed to the keys that define the model; debugmodel is ours, small enough
// for tests, with a window shorter than its sequences where the family slides.
const std::map<std::string, std::string>& flavors() {
  static const std::map<std::string, std::string> table{
      {"debugmodel",
       R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 2048, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true})"},
      {"0.5B",
       R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true})"},
      {"1.5B",
       R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true})"},
      {"3B",
       R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true})"},
      {"7B",
       R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false})"},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_hf_model_spec("qwen2", flavors, hf_family); }

}  // namespace titan::models::qwen2
