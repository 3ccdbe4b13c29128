#include "titan/models/phi3/flavors.h"

#include <map>

#include "titan/models/phi3/hf_family.h"

namespace titan::models::phi3 {

namespace {

// Each flavor is the config.json of a release (microsoft/Phi-3-mini-4k-instruct, Phi-3-medium-4k-instruct),
// trimmed to the keys that define the model; debugmodel is ours, small enough
// for tests, with a window shorter than its sequences where the family slides.
const std::map<std::string, std::string>& flavors() {
  static const std::map<std::string, std::string> table{
      {"debugmodel",
       R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 128, "tie_word_embeddings": false})"},
      {"3.8B",
       R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false})"},
      {"14B",
       R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 32064, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false})"},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_hf_model_spec("phi3", flavors, hf_family); }

}  // namespace titan::models::phi3
