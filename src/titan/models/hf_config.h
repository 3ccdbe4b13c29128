// config.json of a Hugging Face Llama / Qwen3 / Qwen3-MoE model: the keys titan reads,
// the families it knows, and the parser and writer. Apart from the tensor code
// (it needs only dtypes and JSON) so it can be fuzzed on its own.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/ops/rope.h"

namespace titan::models {

// The config.json keys a Llama / Qwen3 causal LM is defined by (transformers'
// LlamaConfig / Qwen3Config names). Keys absent from a file take the family's
// defaults, as transformers does.
struct HfConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;    // "llama", "qwen3"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // 0 = num_attention_heads
  int64_t head_dim = 0;             // 0 = hidden_size / num_attention_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;  // factor 0 = none (rope_scaling null or rope_type "default")
  bool tie_word_embeddings = false;
  std::string torch_dtype;  // "float32", "bfloat16", "float16" or "" when absent
  // Mixture of experts (Qwen3MoeConfig's names; read for families that have them).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.0;
  // Hugging Face adds the auxiliary loss in training only when this is set.
  bool output_router_logits = false;
};

// What a model family registers for HF interop.
struct HfFamily {
  std::string model;         // titan's model name ("llama3")
  std::string architecture;  // "LlamaForCausalLM"
  std::string model_type;    // "llama"
  // The pairing titan's model rotates. HF always rotates halves, so an
  // interleaved family stores q/k rows permuted per head in HF files.
  ops::RopeStyle rope_style = ops::RopeStyle::half;
  bool qk_norm = false;
  bool llama3_rope_scaling = false;  // accepts rope_scaling {rope_type: "llama3"}
  bool mixture_of_experts = false;   // reads the MoE keys (num_experts, ...)
  HfConfig defaults;                 // transformers' defaults for absent keys
  // Boolean keys its config class has for features titan's decoder lacks
  // (attention_bias, ...): written false, and refused when true on reading.
  std::vector<std::string> disabled_features;
};

const std::vector<HfFamily>& hf_families();
const HfFamily& hf_family_for_model(const std::string& model_name);

// Parses and validates config.json text; `source` names the file in errors.
// An unsupported architecture or model_type is an error naming both the file
// and the value. Never reads out of bounds on any input (fuzzed).
HfConfig parse_hf_config(std::string_view json_text, const std::string& source);
HfConfig read_hf_config_file(const std::string& path);
// config.json text for `config` (pretty-printed, keys in transformers' order).
std::string hf_config_json(const HfConfig& config);

const HfFamily& hf_family(const HfConfig& config);
// "torch_dtype" names <-> titan dtypes (float32, bfloat16, float16).
std::string hf_dtype_name(DType dtype);
std::optional<DType> hf_dtype(const std::string& torch_dtype);

}  // namespace titan::models
