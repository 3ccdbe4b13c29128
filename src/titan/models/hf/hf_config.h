// config.json of a Hugging Face causal LM (Llama, Qwen 2/3, Qwen3-MoE, Mistral,
// Gemma 2/3, OLMo 2, Phi-3): the keys titan reads,
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

// DeepSeek-V3's keys (DeepseekV3Config's names, its defaults): multi-head
// latent attention and the router of its mixture-of-experts layers.
struct HfLatentAttention {
  int64_t q_lora_rank = 1536;  // 0: null (a direct query projection)
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  int64_t n_shared_experts = 1;
  double routed_scaling_factor = 2.5;
  int64_t n_group = 8;
  int64_t topk_group = 4;
  int64_t first_k_dense_replace = 3;

  bool operator==(const HfLatentAttention&) const = default;
};

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
  int64_t num_key_value_heads = 0;  // 0 = num_attention_heads (in defaults; parsed configs are explicit)
  int64_t head_dim = 0;             // 0 = hidden_size / num_attention_heads (likewise)
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // rope_scaling (or rope_parameters), every rope_type of transformers but
  // "ntk", with the defaults transformers derives resolved: type none when
  // null or "default"; dynamic's original_max_position is max_position_embeddings;
  // yarn's and longrope's original_max_position the file's (Phi-3: top-level
  // original_max_position_embeddings), else max_position_embeddings; a missing
  // yarn / longrope factor is max_position_embeddings / original.
  ops::RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;  // rotate the first int(head_dim * this) features of each head
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
  // Sliding-window attention: the window (0 = none) and which layers use it,
  // resolved from layer_types, sliding_window_pattern or the family's rule.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;    // [num_hidden_layers]; empty = none
  int64_t sliding_window_pattern = 0;  // Gemma 3: layer i is global iff (i + 1) % pattern == 0
  // Gemma: scores scale by query_pre_attn_scalar^-1/2; logits soft-capped (0 = off).
  double query_pre_attn_scalar = 0.0;
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  double rope_local_base_freq = 0.0;     // Gemma 3's sliding layers' RoPE base
  std::optional<HfLatentAttention> mla;  // set for families with latent_attention
  // gpt-oss's clamped SwiGLU (families with stacked_experts): swiglu_alpha, swiglu_limit.
  double swiglu_alpha = 1.702;
  double swiglu_limit = 7.0;

  bool operator==(const HfConfig&) const = default;
};

// Where a family's blocks normalise: before each sublayer (Llama), before and
// after (Gemma 2/3), or only after, on the sublayer's output (OLMo 2).
enum class HfNorms { pre, pre_and_post, post };
// Which layers slide when config.json sets a window: every layer (Mistral,
// Phi-3), the even ones (Gemma 2), all but every sliding_window_pattern-th
// (Gemma 3); `layer_types` overrides the rule where a file has it.
enum class HfSlidingLayers { none, all, even, pattern };

// The gate of the feed-forward: SwiGLU (silu) or GeGLU (gelu_pytorch_tanh), by config.json's name.
enum class HfActivation { silu, gelu_pytorch_tanh };
const char* hf_activation_name(HfActivation activation);

// What a model family registers for HF interop: its names, transformers'
// defaults, and its conventions as named traits (what the shared code reads
// and writes for it), never a flag named after a family.
struct HfFamily {
  std::string model;         // titan's model name ("llama3")
  std::string architecture;  // "LlamaForCausalLM"
  std::string model_type;    // "llama"
  // The pairing titan's model rotates. HF always rotates halves, so an
  // interleaved family stores q/k rows permuted per head in HF files.
  ops::RopeStyle rope_style = ops::RopeStyle::half;
  bool qk_norm = false;
  bool partial_rotary = false;  // its config class has partial_rotary_factor (Phi-3)
  // Its config class reads longrope's original_max_position_embeddings from the
  // top level of config.json (Phi-3), where it is written too.
  bool top_level_original_max_position = false;
  bool mixture_of_experts = false;        // reads the MoE keys (num_experts, ...)
  bool qk_norm_whole_projection = false;  // OLMo 2: q_norm spans all heads
  bool qkv_bias = false;                  // Qwen 2: biases on q/k/v, always
  bool fused_projections = false;         // Phi-3: qkv_proj and gate_up_proj in one tensor each
  HfNorms norms = HfNorms::pre;
  HfSlidingLayers sliding = HfSlidingLayers::none;
  double norm_weight_offset = 0.0;  // norms scale by (offset + w): Gemma's 1
  bool scaled_embeddings = false;   // embeddings times sqrt(hidden_size) (Gemma)
  HfActivation activation = HfActivation::silu;
  // The key its config class reads the activation from (Gemma's: hidden_activation;
  // published files may carry hidden_act too, and both must then agree).
  std::string activation_key = "hidden_act";
  // query_pre_attn_scalar and the attention and final logit soft-caps (Gemma).
  bool score_scale_and_softcaps = false;
  bool writes_layer_types = false;  // layer_types written whenever a window is (Gemma's files have it)
  bool local_rope = false;          // Gemma 3: rope_local_base_freq on sliding layers
  // DeepSeek-V3: multi-head latent attention, sigmoid routing with the score
  // correction bias, shared experts, group-limited top-k, dense first layers.
  bool latent_attention = false;
  // gpt-oss: a mixture of experts in every layer whose experts are one HF
  // tensor per projection (gate_up_proj [E, hidden, 2 * intermediate] with
  // gate and up interleaved in its columns, down_proj [E, intermediate,
  // hidden], each with a bias; MXFP4 blocks and scales accepted on reading),
  // a router with a bias (mlp.router), the clamped SwiGLU, biases on
  // q/k/v/o (attention_bias, which must not be false) and attention sinks;
  // the experts' count is num_local_experts, their width intermediate_size.
  bool stacked_experts = false;
  HfConfig defaults;  // transformers' defaults for absent keys
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
// Which of `layers` layers slide by the family's own rule (no layer_types):
// Gemma 3's with sliding_window_pattern `pattern`.
std::vector<bool> hf_sliding_rule(const HfFamily& family, int64_t layers, int64_t pattern);
// "torch_dtype" names <-> titan dtypes (float32, bfloat16, float16).
std::string hf_dtype_name(DType dtype);
std::optional<DType> hf_dtype(const std::string& torch_dtype);

}  // namespace titan::models
