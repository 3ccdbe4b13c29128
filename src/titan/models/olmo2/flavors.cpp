#include "titan/models/olmo2/flavors.h"

#include <map>

#include "titan/models/olmo2/hf_family.h"

namespace titan::models::olmo2 {

namespace {

// Each flavor is the config.json of a release (allenai/OLMo-2-0425-1B, OLMo-2-1124-7B, OLMo-2-1124-13B),
// trimmed to the keys that define the model; debugmodel is ours, small enough
// for tests, with a window shorter than its sequences where the family slides.
const std::map<std::string, std::string>& flavors() {
  static const std::map<std::string, std::string> table{
      {"debugmodel",
       R"({"architectures": ["Olmo2ForCausalLM"], "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 2048, "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "tie_word_embeddings": false})"},
      {"1B",
       R"({"architectures": ["Olmo2ForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 100352, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "tie_word_embeddings": false})"},
      {"7B",
       R"({"architectures": ["Olmo2ForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "tie_word_embeddings": false})"},
      {"13B",
       R"({"architectures": ["Olmo2ForCausalLM"], "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 100352, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "tie_word_embeddings": false})"},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_hf_model_spec("olmo2", flavors, hf_family); }

}  // namespace titan::models::olmo2
