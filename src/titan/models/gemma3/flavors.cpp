#include "titan/models/gemma3/flavors.h"

#include <map>

#include "titan/models/gemma3/hf_family.h"

namespace titan::models::gemma3 {

namespace {

// Each flavor is the config.json of a release (google/gemma-3-270m, gemma-3-1b-pt),
// trimmed to the keys that define the model; debugmodel is ours, small enough
// for tests, with a window shorter than its sequences where the family slides.
const std::map<std::string, std::string>& flavors() {
  static const std::map<std::string, std::string> table{
      {"debugmodel",
       R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "query_pre_attn_scalar": 64, "vocab_size": 2048, "max_position_embeddings": 2048, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 128, "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})"},
      {"270M",
       R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "query_pre_attn_scalar": 256, "vocab_size": 262144, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 512, "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})"},
      {"1B",
       R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "query_pre_attn_scalar": 256, "vocab_size": 262144, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 512, "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})"},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_hf_model_spec("gemma3", flavors, hf_family); }

}  // namespace titan::models::gemma3
