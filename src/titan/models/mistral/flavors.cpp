#include "titan/models/mistral/flavors.h"

#include <map>

#include "titan/models/mistral/hf_family.h"

namespace titan::models::mistral {

namespace {

// Each flavor is the config.json of a release (mistralai/Mistral-7B-v0.1, Mistral-Nemo-Base-2407,
// Mistral-Small-24B-Base-2501), trimmed to the keys that define the model; debugmodel is ours, small enough for tests,
// with a window shorter than its sequences where the family slides.
const std::map<std::string, std::string>& flavors() {
  static const std::map<std::string, std::string> table{
      {"debugmodel",
       R"({"architectures": ["MistralForCausalLM"], "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 128, "tie_word_embeddings": false})"},
      {"7B",
       R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false})"},
      {"12B",
       R"({"architectures": ["MistralForCausalLM"], "hidden_size": 5120, "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 1024000, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false})"},
      {"24B",
       R"({"architectures": ["MistralForCausalLM"], "hidden_size": 5120, "intermediate_size": 32768, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 100000000.0, "sliding_window": null, "tie_word_embeddings": false})"},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_hf_model_spec("mistral", flavors, hf_family); }

}  // namespace titan::models::mistral
