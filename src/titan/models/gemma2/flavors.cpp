#include "titan/models/gemma2/flavors.h"

#include <map>

#include "titan/models/gemma2/hf_family.h"

namespace titan::models::gemma2 {

namespace {

// Each flavor is the config.json of a release (google/gemma-2-2b, 9b, 27b),
// trimmed to the keys that define the model; debugmodel is ours, small enough
// for tests, with a window shorter than its sequences where the family slides.
const std::map<std::string, std::string>& flavors() {
  static const std::map<std::string, std::string> table{
      {"debugmodel",
       R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "query_pre_attn_scalar": 64, "vocab_size": 2048, "max_position_embeddings": 2048, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 128, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})"},
      {"2B",
       R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "query_pre_attn_scalar": 256, "vocab_size": 256000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})"},
      {"9B",
       R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "query_pre_attn_scalar": 256, "vocab_size": 256000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})"},
      {"27B",
       R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 4608, "intermediate_size": 36864, "num_hidden_layers": 46, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "query_pre_attn_scalar": 144, "vocab_size": 256000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})"},
  };
  return table;
}

}  // namespace

ModelSpec spec() { return make_hf_model_spec("gemma2", flavors, hf_family); }

}  // namespace titan::models::gemma2
