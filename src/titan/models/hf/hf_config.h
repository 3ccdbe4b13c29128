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
  // DeepSeek's own key (transformers' config class has none): multi-token
  // prediction depths, stored as layers num_hidden_layers + k. Absent: 0.
  int64_t num_nextn_predict_layers = 0;

  bool operator==(const HfLatentAttention&) const = default;
};

// Qwen3.5's keys (Qwen3_5TextConfig / Qwen3_5MoeTextConfig names, their
// defaults): the Gated DeltaNet ("linear_attention") layers, which layers
// they are, and the gated shared expert of the mixture-of-experts form.
struct HfLinearAttention {
  int64_t conv_kernel_dim = 4;  // linear_conv_kernel_dim
  int64_t key_head_dim = 128;   // linear_key_head_dim
  int64_t value_head_dim = 128;
  int64_t num_key_heads = 16;  // linear_num_key_heads
  int64_t num_value_heads = 32;
  std::vector<bool> linear_layers;              // [num_hidden_layers], from layer_types (or the every-4th rule)
  int64_t shared_expert_intermediate_size = 0;  // MoE form only
  // rope_parameters' multimodal sections: text positions give every section
  // the same angle (plain RoPE), so they are only kept to be written back.
  std::vector<int64_t> mrope_section;
  std::optional<bool> mrope_interleaved;

  bool operator==(const HfLinearAttention&) const = default;
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
  std::optional<HfLinearAttention> linear_attention;  // set for families with gated_delta_net
  // Muse Glimmer's text keys (MuseGlimmerTextConfig; read for families with gated_attention):
  // queries times qk_scale_factor after their scaleless norm, logits times
  // output_multiplier before the final soft-cap, the post-sublayer norms' eps,
  // and the layers without RoPE (layer_rope_theta's zeros).
  double qk_scale_factor = 1.0;
  double output_multiplier = 1.0;
  double post_norm_eps = 0.0;
  std::vector<bool> nope_layers;  // [num_hidden_layers]; empty = every layer rotates
  // A multimodal config.json's keys beside text_config (vision_config, image
  // token ids, projector sizes), kept as read (JSON text of an object) and
  // written back, so a converted text model keeps its vision settings.
  std::string multimodal_keys;

  bool operator==(const HfConfig&) const = default;
};

// Where a family's blocks normalise: before each sublayer (Llama), before and
// after (Gemma 2/3), or only after, on the sublayer's output (OLMo 2).
enum class HfNorms { pre, pre_and_post, post };
// Which layers slide when config.json sets a window: every layer (Mistral,
// Phi-3), the even ones (Gemma 2), all but every sliding_window_pattern-th
// (Gemma 3); `layer_types` overrides the rule where a file has it.
// Muse Glimmer's rule: every 4th layer counted back from the last is global (and NoPE).
enum class HfSlidingLayers { none, all, even, pattern, every_fourth_from_last };

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
  // Qwen3.5: Gated DeltaNet layers where layer_types says linear_attention
  // (linear_attn.in_proj_qkv: q, k, v rows; conv1d [channels, 1, kernel]:
  // q, k, v channels; in_proj_z, in_proj_b, in_proj_a, A_log, dt_bias, norm
  // scaling by w itself, out_proj), full-attention layers whose q_proj holds
  // per head the query rows then the sigmoid output gate's (titan: wq and
  // o_gate), and every norm else scaling by 1 + w.
  bool gated_delta_net = false;
  // With gated_delta_net, the mixture-of-experts form (its own architecture):
  // every layer routes softmax top-k renormalised (mlp.gate) over experts held
  // as mlp.experts.gate_up_proj [E, 2 * moe_intermediate_size, hidden] (each
  // expert's gate rows, then its up rows) and down_proj [E, hidden, moe_intermediate_size],
  // plus one shared expert (mlp.shared_expert.*) scaled by sigmoid(mlp.shared_expert_gate).
  bool joined_experts = false;
  // The family's other config.json forms (their own architecture and
  // model_type: Qwen3.5's mixture-of-experts and multimodal ones), each a
  // whole HfFamily; hf_families() lists them after this one.
  std::vector<HfFamily> other_forms;
  // Muse Glimmer: a sigmoid gate on the attention output (self_attn.gate_proj)
  // before o_proj, scaleless q/k norms with queries times qk_scale_factor,
  // a scaleless norm on the looked-up embeddings, post-sublayer norms of
  // their own eps (post_norm_eps), a final norm scaling by w itself (the
  // blocks' by 1 + w), logits times output_multiplier before the
  // final_logit_softcapping, and NoPE layers (layer_rope_theta 0).
  bool gated_attention = false;
  // Where the decoder's tensors live: "model." (model.layers.N...), or a
  // multimodal model's text tower ("model.language_model."); lm_head.weight is top-level.
  std::string weights_prefix = "model.";
  // Set for a multimodal ForConditionalGeneration: config.json holds the
  // decoder's keys in text_config, of this model_type; the other top-level
  // keys (the vision tower's) are kept as they are (HfConfig::multimodal_keys).
  std::string text_model_type;
  // Tensors of the folder titan does not read (a vision tower), by name prefix:
  // skipped when reading, never written.
  std::vector<std::string> skipped_tensor_prefixes;
  // Where non-empty: the only keys its (text) config may have; any other is an
  // error naming it, so no setting titan does not implement passes unread.
  std::vector<std::string> known_keys;
  // RoPE written as transformers 5's rope_parameters (rope_theta inside) rather than rope_theta / rope_scaling.
  bool writes_rope_parameters = false;
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
