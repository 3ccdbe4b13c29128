#include "titan/models/hf/hf_config.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "titan/core/error.h"
#include "titan/models/families.h"
#include "titan/models/hf/config_json_reader.h"

namespace titan::models {

// Each family's traits, declared from the list (its folder's hf_family.cpp defines them).
#define TITAN_DECLARE_HF_FAMILY(name) \
  namespace name {                    \
  HfFamily hf_family();               \
  }
TITAN_MODEL_FAMILIES(TITAN_DECLARE_HF_FAMILY)
#undef TITAN_DECLARE_HF_FAMILY

namespace {

using Json = nlohmann::json;

// Sizes beyond these are no model anyone trains; refusing them keeps products
// such as heads x head_dim far from int64 overflow on hostile input.
constexpr int64_t kMaxDimension = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 100000;
constexpr int64_t kMaxPositions = int64_t{1} << 26;

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const HfFamily& family : hf_families()) names.push_back(family.architecture);
  return names;
}

// The keys each rope_type reads (transformers' modeling_rope_utils), besides
// rope_type / type; rope_parameters objects may also hold rope_theta and
// partial_rotary_factor.
std::vector<std::string> rope_scaling_keys(ops::RopeScalingType type) {
  using ops::RopeScalingType;
  switch (type) {
    case RopeScalingType::none:
      return {};
    case RopeScalingType::linear:
      return {"factor"};
    case RopeScalingType::dynamic:
      return {"factor", "original_max_position_embeddings"};
    case RopeScalingType::yarn:
      return {"factor",           "original_max_position_embeddings",
              "attention_factor", "beta_fast",
              "beta_slow",        "mscale",
              "mscale_all_dim",   "truncate"};
    case RopeScalingType::longrope:
      return {"short_factor", "long_factor", "factor", "attention_factor", "original_max_position_embeddings"};
    case RopeScalingType::llama3:
      return {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  }
  return {};
}

std::vector<double> read_factor_list(const Json& object, const char* key, const std::string& where,
                                     const std::string& source) {
  TITAN_CHECK(object.contains(key) && object[key].is_array() && !object[key].empty(),
              "{}: {} of type longrope needs '{}', a list of numbers", source, where, key);
  std::vector<double> values;
  for (const Json& item : object[key]) {
    TITAN_CHECK(item.is_number() && std::isfinite(item.get<double>()) && item.get<double>() > 0.0,
                "{}: '{}.{}' holds {}, which is not a positive number", source, where, key, item.dump());
    values.push_back(item.get<double>());
  }
  return values;
}

// A rope_scaling object (`key` names it in errors) into config.rope_scaling.
// `top_level` is config.json itself, for Phi-3's top-level original_max_position_embeddings.
void read_rope_scaling_object(const Json& scaling, const std::string& key, const std::string& source,
                              const Json& top_level, const HfFamily& family, HfConfig& config, bool rope_parameters) {
  using ops::RopeScalingType;
  TITAN_CHECK(scaling.is_object(), "{}: '{}' must be an object or null, got {}", source, key, scaling.dump());
  const ConfigJsonReader reader(scaling, source);
  std::string name = reader.get_string("rope_type");
  const std::string old_name = reader.get_string("type");  // older transformers name it "type"
  TITAN_CHECK(name.empty() || old_name.empty() || name == old_name, "{}: '{}' has rope_type '{}' and type '{}'", source,
              key, name, old_name);
  if (name.empty()) name = old_name;
  if (name.empty()) name = "default";
  ops::RopeScaling s;
  bool known = false;
  for (RopeScalingType type : {RopeScalingType::none, RopeScalingType::linear, RopeScalingType::dynamic,
                               RopeScalingType::yarn, RopeScalingType::longrope, RopeScalingType::llama3}) {
    if (name == ops::rope_scaling_type_name(type)) {
      s.type = type;
      known = true;
    }
  }
  TITAN_CHECK(known,
              "{}: {} type '{}' is not supported for {} (supported: default, linear, dynamic, yarn, longrope, "
              "llama3)",
              source, key, name, family.architecture);
  std::vector<std::string> allowed = rope_scaling_keys(s.type);
  allowed.insert(allowed.end(), {"rope_type", "type"});
  if (rope_parameters) allowed.insert(allowed.end(), {"rope_theta", "partial_rotary_factor"});
  // Qwen3.5's multimodal RoPE sections: text positions turn them into plain RoPE (read_linear_attention).
  if (rope_parameters && family.gated_delta_net) allowed.insert(allowed.end(), {"mrope_section", "mrope_interleaved"});
  for (const auto& [item, value] : scaling.items()) {
    TITAN_CHECK(std::find(allowed.begin(), allowed.end(), item) != allowed.end(),
                "{}: '{}.{}' is not supported for rope_type '{}' (it reads: {})", source, key, item, name,
                fmt::join(rope_scaling_keys(s.type), ", "));
  }
  const int64_t max_positions = config.max_position_embeddings;
  switch (s.type) {
    case RopeScalingType::none:
      break;
    case RopeScalingType::linear:
    case RopeScalingType::dynamic:
    case RopeScalingType::llama3:
      TITAN_CHECK(reader.has("factor"), "{}: {} of type {} needs 'factor'", source, key, name);
      reader.get("factor", s.factor);
      break;
    case RopeScalingType::yarn:
    case RopeScalingType::longrope:
      reader.get("factor", s.factor);  // absent: derived below
      break;
  }
  if (s.type == RopeScalingType::dynamic) {
    // transformers' dynamic scaling grows the base past max_position_embeddings (it ignores this key):
    // a file naming another length would mean a model titan does not build.
    s.original_max_position = max_positions;
    int64_t original = max_positions;
    reader.get_positive("original_max_position_embeddings", original, kMaxPositions);
    TITAN_CHECK(original == max_positions,
                "{}: '{}.original_max_position_embeddings' = {} differs from max_position_embeddings {}: transformers' "
                "dynamic scaling uses max_position_embeddings, and so does titan",
                source, key, original, max_positions);
  }
  if (s.type == RopeScalingType::llama3) {
    reader.get("low_freq_factor", s.low_freq_factor);
    reader.get("high_freq_factor", s.high_freq_factor);
    reader.get_positive("original_max_position_embeddings", s.original_max_position, kMaxPositions);
    // The smoothing between the two wavelength bounds divides by their difference.
    TITAN_CHECK(s.high_freq_factor > s.low_freq_factor, "{}: {} high_freq_factor {} must exceed low_freq_factor {}",
                source, key, s.high_freq_factor, s.low_freq_factor);
  }
  if (s.type == RopeScalingType::yarn || s.type == RopeScalingType::longrope) {
    s.original_max_position = max_positions;
    const ConfigJsonReader top(top_level, source);
    if (s.type == RopeScalingType::longrope && family.top_level_original_max_position) {
      top.get_positive("original_max_position_embeddings", s.original_max_position, kMaxPositions);
    }
    if (reader.has("original_max_position_embeddings")) {
      const bool at_top = s.type == RopeScalingType::longrope && family.top_level_original_max_position &&
                          top.has("original_max_position_embeddings");
      int64_t inside = 0;
      reader.get_positive("original_max_position_embeddings", inside, kMaxPositions);
      TITAN_CHECK(!at_top || inside == s.original_max_position,
                  "{}: original_max_position_embeddings is {} at the top level and {} in '{}'", source,
                  s.original_max_position, inside, key);
      s.original_max_position = inside;
    }
    if (s.factor == 0.0) {
      s.factor = static_cast<double>(max_positions) / static_cast<double>(s.original_max_position);
    }
    reader.get("attention_factor", s.attention_factor);
  }
  if (s.type == RopeScalingType::yarn) {
    reader.get("beta_fast", s.beta_fast);
    reader.get("beta_slow", s.beta_slow);
    reader.get_non_negative("mscale", s.mscale);
    reader.get_non_negative("mscale_all_dim", s.mscale_all_dim);
    reader.get("truncate", s.truncate);
  }
  if (s.type == RopeScalingType::longrope) {
    s.short_factor = read_factor_list(scaling, "short_factor", key, source);
    s.long_factor = read_factor_list(scaling, "long_factor", key, source);
  }
  config.rope_scaling = s;
}

void read_rope_scaling(const Json& json, const std::string& source, const HfFamily& family, HfConfig& config) {
  if (!json.contains("rope_scaling") || json["rope_scaling"].is_null()) return;
  read_rope_scaling_object(json["rope_scaling"], "rope_scaling", source, json, family, config, false);
}

// partial_rotary_factor (top level, or in a rope_parameters object): in (0, 1], and only where the family has it.
void read_partial_rotary_factor(const ConfigJsonReader& reader, const std::string& key, const std::string& source,
                                const HfFamily& family, double& factor) {
  if (!reader.has("partial_rotary_factor")) return;
  double value = 1.0;
  reader.get("partial_rotary_factor", value);
  TITAN_CHECK(value <= 1.0, "{}: '{}' = {} must be in (0, 1]", source, key, value);
  TITAN_CHECK(value == 1.0 || family.partial_rotary,
              "{}: '{}' = {} is not supported for {} (its config class has no partial rotary embedding)", source, key,
              value, family.architecture);
  factor = value;
}

// transformers 5 writes RoPE as rope_parameters {rope_theta, rope_type, ...}
// (Gemma 3: one per layer type) in place of rope_theta / rope_scaling /
// rope_local_base_freq; where a file has it, it decides.
void read_rope_parameters(const Json& json, const std::string& source, const HfFamily& family, HfConfig& config) {
  if (!json.contains("rope_parameters") || json["rope_parameters"].is_null()) return;
  const Json& parameters = json["rope_parameters"];
  TITAN_CHECK(parameters.is_object(), "{}: 'rope_parameters' must be an object, got {}", source, parameters.dump());
  const auto read_one = [&](const Json& object, const std::string& key, double& theta, bool scaled) {
    TITAN_CHECK(object.is_object(), "{}: '{}' must be an object, got {}", source, key, object.dump());
    const ConfigJsonReader reader(object, source);
    reader.get("rope_theta", theta);
    if (scaled) {
      read_partial_rotary_factor(reader, key + ".partial_rotary_factor", source, family, config.partial_rotary_factor);
      config.rope_scaling = ops::RopeScaling{};
      read_rope_scaling_object(object, key, source, json, family, config, true);
    } else {
      // Gemma 3's local table is never scaled, and rotates whole heads.
      HfConfig unscaled;
      unscaled.max_position_embeddings = config.max_position_embeddings;
      read_partial_rotary_factor(reader, key + ".partial_rotary_factor", source, family,
                                 unscaled.partial_rotary_factor);
      read_rope_scaling_object(object, key, source, json, family, unscaled, true);
      TITAN_CHECK(unscaled.rope_scaling.type == ops::RopeScalingType::none &&
                      unscaled.partial_rotary_factor == config.partial_rotary_factor,
                  "{}: '{}' scales its RoPE or rotates part of the heads, which titan's local table does not "
                  "(supported: rope_type default)",
                  source, key);
    }
  };
  if (family.local_rope && (parameters.contains("full_attention") || parameters.contains("sliding_attention"))) {
    for (const auto& [type, object] : parameters.items()) {
      TITAN_CHECK(type == "full_attention" || type == "sliding_attention",
                  "{}: 'rope_parameters' holds '{}', which is not a layer type of {}", source, type,
                  family.architecture);
      const bool global = type == "full_attention";
      read_one(object, "rope_parameters." + type, global ? config.rope_theta : config.rope_local_base_freq, global);
    }
    return;
  }
  read_one(parameters, "rope_parameters", config.rope_theta, true);
}

void read_mixture_of_experts(const ConfigJsonReader& reader, const std::string& source, const HfFamily& family,
                             HfConfig& config) {
  reader.get_required("num_experts", config.num_experts, kMaxDimension);
  reader.get_required("num_experts_per_tok", config.num_experts_per_tok, kMaxDimension);
  reader.get_required("moe_intermediate_size", config.moe_intermediate_size, kMaxDimension);
  reader.get("norm_topk_prob", config.norm_topk_prob);
  reader.get_positive("decoder_sparse_step", config.decoder_sparse_step, kMaxLayers);
  reader.get_layers("mlp_only_layers", config.mlp_only_layers, config.num_hidden_layers);
  reader.get_non_negative("router_aux_loss_coef", config.router_aux_loss_coef);
  reader.get("output_router_logits", config.output_router_logits);
  TITAN_CHECK(config.num_experts_per_tok <= config.num_experts,
              "{}: 'num_experts_per_tok' = {} exceeds 'num_experts' = {}", source, config.num_experts_per_tok,
              config.num_experts);
  // Qwen2-MoE's shared expert and gate have no place in a Qwen3-MoE layer.
  int64_t shared = 0;
  reader.get("shared_expert_intermediate_size", shared, 0, kMaxDimension);
  TITAN_CHECK(shared == 0,
              "{}: 'shared_expert_intermediate_size' = {} is not supported for {} (it has no shared "
              "experts)",
              source, shared, family.architecture);
}

// gpt-oss's experts (GptOssConfig's names): num_local_experts of intermediate_size
// each in every layer, softmax over the top k logits (the chosen scores renormalised).
void read_stacked_experts(const ConfigJsonReader& reader, const std::string& source, HfConfig& config) {
  reader.get_required("num_local_experts", config.num_experts, kMaxDimension);
  reader.get_required("num_experts_per_tok", config.num_experts_per_tok, kMaxDimension);
  TITAN_CHECK(config.num_experts_per_tok <= config.num_experts,
              "{}: 'num_experts_per_tok' = {} exceeds 'num_local_experts' = {}", source, config.num_experts_per_tok,
              config.num_experts);
  config.moe_intermediate_size = config.intermediate_size;
  config.norm_topk_prob = true;
  reader.get_non_negative("router_aux_loss_coef", config.router_aux_loss_coef);
  reader.get("output_router_logits", config.output_router_logits);
  reader.get("swiglu_alpha", config.swiglu_alpha);
  reader.get("swiglu_limit", config.swiglu_limit);
  // q/k/v/o biases are part of every gpt-oss layer.
  bool attention_bias = true;
  reader.get("attention_bias", attention_bias);
  TITAN_CHECK(attention_bias, "{}: 'attention_bias' = false is not supported for {} (its layers have q/k/v/o biases)",
              source, config.architecture);
}

// DeepSeek-V3's latent attention and router keys (DeepseekV3Config's names).
void read_latent_attention(const Json& json, const ConfigJsonReader& reader, const std::string& source,
                           const HfFamily& family, HfConfig& config) {
  HfLatentAttention m = config.mla.value_or(HfLatentAttention{});
  // q_lora_rank null: queries straight from the hidden state.
  if (reader.is_null("q_lora_rank")) {
    m.q_lora_rank = 0;
  } else {
    reader.get_positive("q_lora_rank", m.q_lora_rank, kMaxDimension);
  }
  reader.get_positive("kv_lora_rank", m.kv_lora_rank, kMaxDimension);
  reader.get("qk_nope_head_dim", m.qk_nope_head_dim, 0, kMaxDimension);
  reader.get_positive("qk_rope_head_dim", m.qk_rope_head_dim, kMaxDimension);
  reader.get_positive("v_head_dim", m.v_head_dim, kMaxDimension);
  reader.get_positive("n_routed_experts", config.num_experts, kMaxDimension);
  reader.get_positive("num_experts_per_tok", config.num_experts_per_tok, kMaxDimension);
  reader.get_positive("moe_intermediate_size", config.moe_intermediate_size, kMaxDimension);
  reader.get("norm_topk_prob", config.norm_topk_prob);
  reader.get("n_shared_experts", m.n_shared_experts, 0, kMaxDimension);
  reader.get("routed_scaling_factor", m.routed_scaling_factor);
  reader.get_positive("n_group", m.n_group, kMaxDimension);
  reader.get_positive("topk_group", m.topk_group, kMaxDimension);
  reader.get("first_k_dense_replace", m.first_k_dense_replace, 0, kMaxLayers);
  reader.get("num_nextn_predict_layers", m.num_nextn_predict_layers, 0, kMaxLayers);
  TITAN_CHECK(m.qk_rope_head_dim % 2 == 0, "{}: qk_rope_head_dim {} must be even for rotary embeddings", source,
              m.qk_rope_head_dim);
  TITAN_CHECK(config.num_experts % m.n_group == 0 && m.topk_group <= m.n_group &&
                  config.num_experts_per_tok <= m.topk_group * (config.num_experts / m.n_group),
              "{}: {} routed experts in n_group {} groups, topk_group {} of them, cannot give num_experts_per_tok {}",
              source, config.num_experts, m.n_group, m.topk_group, config.num_experts_per_tok);
  TITAN_CHECK(m.n_group == 1 || config.num_experts / m.n_group >= 2,
              "{}: groups of one expert (n_group {} of {} experts) have no top-2 to score them by", source, m.n_group,
              config.num_experts);
  // transformers' DeepseekV3 scores with sigmoid and the correction bias, and
  // rotates interleaved pairs unless rope_interleave is false; older files
  // name these choices, which must then be the ones it computes.
  const std::string scoring = reader.get_string("scoring_func");
  TITAN_CHECK(scoring.empty() || scoring == "sigmoid",
              "{}: 'scoring_func' = '{}' is not supported for {} (it scores experts with sigmoid)", source, scoring,
              family.architecture);
  const std::string method = reader.get_string("topk_method");
  TITAN_CHECK(method.empty() || method == "noaux_tc",
              "{}: 'topk_method' = '{}' is not supported for {} (it routes by noaux_tc)", source, method,
              family.architecture);
  bool interleave = true;
  reader.get("rope_interleave", interleave);
  TITAN_CHECK(interleave, "{}: 'rope_interleave' = false is not supported for {} (titan rotates interleaved pairs)",
              source, family.architecture);
  int64_t frequency = 1;
  reader.get("moe_layer_freq", frequency, 1, kMaxLayers);
  TITAN_CHECK(frequency == 1,
              "{}: 'moe_layer_freq' = {} is not supported for {} (every layer after "
              "first_k_dense_replace is a mixture of experts)",
              source, frequency, family.architecture);
  config.mla = m;
}

// Qwen3.5's keys (Qwen3_5TextConfig / Qwen3_5MoeTextConfig names): the Gated
// DeltaNet layers' shapes, which layers they are (layer_types, else every
// full_attention_interval-th layer is full attention), the experts of the
// mixture-of-experts form, and rope_parameters' multimodal sections.
void read_linear_attention(const Json& body, const ConfigJsonReader& reader, const std::string& source,
                           const HfFamily& family, HfConfig& config) {
  HfLinearAttention m = config.linear_attention.value_or(HfLinearAttention{});
  reader.get_positive("linear_conv_kernel_dim", m.conv_kernel_dim, kMaxDimension);
  reader.get_positive("linear_key_head_dim", m.key_head_dim, kMaxDimension);
  reader.get_positive("linear_value_head_dim", m.value_head_dim, kMaxDimension);
  reader.get_positive("linear_num_key_heads", m.num_key_heads, kMaxDimension);
  reader.get_positive("linear_num_value_heads", m.num_value_heads, kMaxDimension);
  TITAN_CHECK(m.num_value_heads % m.num_key_heads == 0,
              "{}: 'linear_num_value_heads' = {} is not a multiple of 'linear_num_key_heads' = {}", source,
              m.num_value_heads, m.num_key_heads);
  const int64_t n = config.num_hidden_layers;
  int64_t interval = 4;
  reader.get_positive("full_attention_interval", interval, kMaxLayers);
  m.linear_layers.assign(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) m.linear_layers[static_cast<size_t>(i)] = (i + 1) % interval != 0;
  if (reader.has("layer_types")) {
    const Json& types = body["layer_types"];
    TITAN_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == n,
                "{}: 'layer_types' must list one entry per layer ({}), got {}", source, n, types.dump());
    for (size_t i = 0; i < types.size(); ++i) {
      const bool linear = types[i] == "linear_attention";
      TITAN_CHECK(linear || types[i] == "full_attention",
                  "{}: 'layer_types' holds {} at layer {}, which is not supported for {} (linear_attention or "
                  "full_attention)",
                  source, types[i].dump(), i, family.architecture);
      m.linear_layers[i] = linear;
    }
  }
  // Qwen3.5's attention always has the output gate, and its recurrent state is float32 (titan's);
  // Qwen3-Next-style files name these choices.
  bool gate = true;
  reader.get("attn_output_gate", gate);
  TITAN_CHECK(gate, "{}: 'attn_output_gate' = false is not supported for {} (its attention always gates its output)",
              source, family.architecture);
  const std::string state_dtype = reader.get_string("mamba_ssm_dtype");
  TITAN_CHECK(state_dtype.empty() || state_dtype == "float32",
              "{}: 'mamba_ssm_dtype' = '{}' is not supported for {} (titan keeps the recurrent state in float32)",
              source, state_dtype, family.architecture);
  if (family.joined_experts) {
    reader.get_required("num_experts", config.num_experts, kMaxDimension);
    reader.get_required("num_experts_per_tok", config.num_experts_per_tok, kMaxDimension);
    reader.get_required("moe_intermediate_size", config.moe_intermediate_size, kMaxDimension);
    reader.get_positive("shared_expert_intermediate_size", m.shared_expert_intermediate_size, kMaxDimension);
    reader.get_non_negative("router_aux_loss_coef", config.router_aux_loss_coef);
    reader.get("output_router_logits", config.output_router_logits);
    TITAN_CHECK(config.num_experts_per_tok <= config.num_experts,
                "{}: 'num_experts_per_tok' = {} exceeds 'num_experts' = {}", source, config.num_experts_per_tok,
                config.num_experts);
    // titan's shared experts are one FFN of a multiple of the experts' width.
    TITAN_CHECK(m.shared_expert_intermediate_size % config.moe_intermediate_size == 0,
                "{}: 'shared_expert_intermediate_size' = {} is not supported for {}: titan's shared expert is a "
                "multiple of moe_intermediate_size {} wide",
                source, m.shared_expert_intermediate_size, family.architecture, config.moe_intermediate_size);
    // transformers' router always renormalises the top k; Qwen3-Next-style keys that would say otherwise are refused.
    bool normalized = true;
    reader.get("norm_topk_prob", normalized);
    TITAN_CHECK(normalized, "{}: 'norm_topk_prob' = false is not supported for {} (its router renormalises the top k)",
                source, family.architecture);
    config.norm_topk_prob = true;
    int64_t step = 1;
    reader.get_positive("decoder_sparse_step", step, kMaxLayers);
    TITAN_CHECK(step == 1,
                "{}: 'decoder_sparse_step' = {} is not supported for {} (every layer is a mixture of experts)", source,
                step, family.architecture);
    std::vector<int64_t> dense;
    reader.get_layers("mlp_only_layers", dense, n);
    TITAN_CHECK(dense.empty(), "{}: 'mlp_only_layers' is not supported for {} (every layer is a mixture of experts)",
                source, family.architecture);
  }
  if (body.contains("rope_parameters") && body["rope_parameters"].is_object()) {
    const Json& rope = body["rope_parameters"];
    if (rope.contains("mrope_section")) {
      const Json& sections = rope["mrope_section"];
      TITAN_CHECK(sections.is_array(), "{}: 'rope_parameters.mrope_section' must be a list, got {}", source,
                  sections.dump());
      m.mrope_section.clear();
      for (const Json& item : sections) {
        TITAN_CHECK(item.is_number_integer() && item.get<int64_t>() >= 0 && item.get<int64_t>() <= kMaxDimension,
                    "{}: 'rope_parameters.mrope_section' holds {}, which is not a count of frequencies", source,
                    item.dump());
        m.mrope_section.push_back(item.get<int64_t>());
      }
    }
    if (rope.contains("mrope_interleaved")) {
      TITAN_CHECK(rope["mrope_interleaved"].is_boolean(),
                  "{}: 'rope_parameters.mrope_interleaved' must be true or false, got {}", source,
                  rope["mrope_interleaved"].dump());
      m.mrope_interleaved = rope["mrope_interleaved"].get<bool>();
    }
  }
  config.linear_attention = m;
}

// The activation of the gate: Gemma's GeGLU (transformers reads hidden_activation; published files carry
// hidden_act too, and both must agree), everyone else's SwiGLU.
void read_activation(const ConfigJsonReader& reader, const std::string& source, const HfFamily& family) {
  const char* expected = hf_activation_name(family.activation);
  std::vector<std::string> keys{"hidden_act"};
  if (family.activation_key != keys.front()) keys.push_back(family.activation_key);
  for (const std::string& key : keys) {
    const std::string activation = reader.get_string(key.c_str());
    TITAN_CHECK(activation.empty() || activation == expected, "{}: {} '{}' is not supported for {} (titan uses {})",
                source, key, activation, family.architecture, expected);
  }
}

// Which layers slide, resolved into config.sliding_layers: `layer_types` where the file has it, else the
// family's rule. A null or absent window (where the family's default is none) means no layer slides.
void read_sliding_window(const Json& json, const ConfigJsonReader& reader, const std::string& source,
                         const HfFamily& family, HfConfig& config) {
  if (family.sliding == HfSlidingLayers::none) return;  // Qwen 2's inactive window keys are not read
  if (reader.is_null("sliding_window")) config.sliding_window = 0;
  reader.get_positive("sliding_window", config.sliding_window, kMaxPositions);
  if (family.sliding == HfSlidingLayers::pattern) {
    reader.get_positive("sliding_window_pattern", config.sliding_window_pattern, kMaxLayers);
  }
  std::vector<bool> layers = hf_sliding_rule(family, config.num_hidden_layers, config.sliding_window_pattern);
  if (reader.has("layer_types")) {
    const Json& types = json["layer_types"];
    TITAN_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == config.num_hidden_layers,
                "{}: 'layer_types' must list one entry per layer ({}), got {}", source, config.num_hidden_layers,
                types.dump());
    for (size_t i = 0; i < types.size(); ++i) {
      const bool sliding = types[i] == "sliding_attention";
      TITAN_CHECK(sliding || types[i] == "full_attention",
                  "{}: 'layer_types' holds {} at layer {}, which is not supported for {} (sliding_attention or "
                  "full_attention)",
                  source, types[i].dump(), i, family.architecture);
      layers[i] = sliding;
    }
  }
  config.sliding_layers = config.sliding_window > 0 ? layers : std::vector<bool>{};
}

// The score scale and soft-caps (null: off).
void read_score_scale_and_softcaps(const ConfigJsonReader& reader, HfConfig& config) {
  reader.get("query_pre_attn_scalar", config.query_pre_attn_scalar);
  for (auto [key, value] : {std::pair{"attn_logit_softcapping", &config.attn_logit_softcapping},
                            std::pair{"final_logit_softcapping", &config.final_logit_softcapping}}) {
    if (reader.is_null(key)) *value = 0.0;
    reader.get(key, *value);
  }
}

// PreTrainedConfig's own keys: token ids, output switches and bookkeeping,
// none of which changes what the model computes.
const std::vector<std::string>& generic_config_keys() {
  static const std::vector<std::string> keys{"architectures",
                                             "model_type",
                                             "torch_dtype",
                                             "dtype",
                                             "transformers_version",
                                             "_name_or_path",
                                             "use_cache",
                                             "pad_token_id",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "initializer_range",
                                             "output_attentions",
                                             "output_hidden_states",
                                             "return_dict",
                                             "tie_word_embeddings",
                                             "id2label",
                                             "label2id",
                                             "problem_type",
                                             "chunk_size_feed_forward",
                                             "is_encoder_decoder",
                                             "add_cross_attention",
                                             "tokenizer_class",
                                             "_attn_implementation_autoset",
                                             "use_bfloat16",
                                             "torchscript",
                                             "pruned_heads"};
  return keys;
}

// A family that lists its config class's keys (HfFamily::known_keys) accepts no
// other: a setting titan does not implement must not pass unread.
void check_known_keys(const Json& body, const std::string& source, const HfFamily& family) {
  if (family.known_keys.empty()) return;
  const auto listed = [](const std::vector<std::string>& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  for (const auto& [key, value] : body.items()) {
    TITAN_CHECK(listed(family.known_keys, key) || listed(generic_config_keys(), key),
                "{}: '{}' is not supported for {} (not a key titan reads; titan implements: {})", source, key,
                family.architecture, fmt::join(family.known_keys, ", "));
  }
}

// A multimodal config.json's top level: text_config of the family's text
// model_type, tie_word_embeddings agreeing with text_config's where both say
// it, and the vision tower's keys kept as they are (titan trains the text
// decoder only; its folders' vision tensors are skipped).
void read_multimodal_keys(const Json& json, const ConfigJsonReader& top, const ConfigJsonReader& text,
                          const std::string& source, const HfFamily& family, HfConfig& config) {
  const std::string text_type = text.get_string("model_type");
  TITAN_CHECK(text_type.empty() || text_type == family.text_model_type,
              "{}: text_config's model_type '{}' is not {}'s text model ('{}')", source, text_type, family.architecture,
              family.text_model_type);
  bool tied = config.tie_word_embeddings;
  top.get("tie_word_embeddings", tied);
  config.tie_word_embeddings = tied;
  bool text_tied = tied;
  text.get("tie_word_embeddings", text_tied);
  TITAN_CHECK(text_tied == tied, "{}: tie_word_embeddings is {} at the top level and {} in text_config", source, tied,
              text_tied);
  Json kept = Json::object();
  for (const auto& [key, value] : json.items()) {
    if (key == "text_config" ||
        std::find(generic_config_keys().begin(), generic_config_keys().end(), key) != generic_config_keys().end()) {
      continue;
    }
    kept[key] = value;
  }
  config.multimodal_keys = kept.empty() ? "" : kept.dump();
}

// Muse Glimmer's text keys (MuseGlimmerTextConfig's names). The soft-cap is
// always applied by its model (it divides by it), so null is refused;
// layer_rope_theta's zeros are the NoPE layers, and any other entry must be
// rope_theta: transformers rotates every other layer with the one table.
void read_gated_attention(const Json& body, const ConfigJsonReader& reader, const std::string& source,
                          const HfFamily& family, HfConfig& config) {
  reader.get("qk_scale_factor", config.qk_scale_factor);
  reader.get("output_multiplier", config.output_multiplier);
  reader.get("post_norm_eps", config.post_norm_eps);
  TITAN_CHECK(!reader.is_null("final_logit_softcapping"),
              "{}: 'final_logit_softcapping' = null is not supported for {} (its logits are always soft-capped)",
              source, family.architecture);
  reader.get("final_logit_softcapping", config.final_logit_softcapping);
  const int64_t n = config.num_hidden_layers;
  config.nope_layers.assign(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) config.nope_layers[static_cast<size_t>(i)] = (n - 1 - i) % 4 == 0;
  if (!reader.has("layer_rope_theta")) return;
  const Json& thetas = body["layer_rope_theta"];
  TITAN_CHECK(thetas.is_array() && static_cast<int64_t>(thetas.size()) == n,
              "{}: 'layer_rope_theta' must list one number per layer ({}), got {}", source, n, thetas.dump());
  for (size_t i = 0; i < thetas.size(); ++i) {
    TITAN_CHECK(thetas[i].is_number() && std::isfinite(thetas[i].get<double>()) && thetas[i].get<double>() >= 0.0,
                "{}: 'layer_rope_theta' holds {} at layer {}, which is not a number >= 0", source, thetas[i].dump(), i);
    const double theta = thetas[i].get<double>();
    TITAN_CHECK(theta == 0.0 || theta == config.rope_theta,
                "{}: 'layer_rope_theta' = {} at layer {} is not supported for {}: only 0 (no RoPE) or rope_theta {} "
                "(transformers rotates every RoPE layer with the one table, and so does titan)",
                source, theta, i, family.architecture, config.rope_theta);
    config.nope_layers[i] = theta == 0.0;
  }
}

}  // namespace

std::vector<bool> hf_sliding_rule(const HfFamily& family, int64_t layers, int64_t pattern) {
  std::vector<bool> sliding(static_cast<size_t>(std::max<int64_t>(layers, 0)), false);
  for (int64_t i = 0; i < layers; ++i) {
    switch (family.sliding) {
      case HfSlidingLayers::none:
        break;
      case HfSlidingLayers::all:
        sliding[static_cast<size_t>(i)] = true;
        break;
      case HfSlidingLayers::even:
        sliding[static_cast<size_t>(i)] = i % 2 == 0;
        break;
      case HfSlidingLayers::pattern:
        sliding[static_cast<size_t>(i)] = pattern <= 0 || (i + 1) % pattern != 0;
        break;
      case HfSlidingLayers::every_fourth_from_last:
        sliding[static_cast<size_t>(i)] = (layers - 1 - i) % 4 != 0;
        break;
    }
  }
  return sliding;
}

const std::vector<HfFamily>& hf_families() {
#define TITAN_HF_FAMILY(name) name::hf_family(),
  static const std::vector<HfFamily> families = [] {
    std::vector<HfFamily> list;
    for (HfFamily& family : std::vector<HfFamily>{TITAN_MODEL_FAMILIES(TITAN_HF_FAMILY)}) {
      // A family's other config.json forms follow it; each is a family of its own (same model).
      std::vector<HfFamily> forms = std::move(family.other_forms);
      family.other_forms.clear();
      list.push_back(std::move(family));
      for (HfFamily& form : forms) list.push_back(std::move(form));
    }
    return list;
  }();
#undef TITAN_HF_FAMILY
  return families;
}

const HfFamily& hf_family_for_model(const std::string& model_name) {
  for (const HfFamily& family : hf_families()) {
    if (family.model == model_name) return family;
  }
  fail("model '{}' has no Hugging Face adapter", model_name);
}

const HfFamily& hf_family(const HfConfig& config) {
  for (const HfFamily& family : hf_families()) {
    if (family.architecture == config.architecture) return family;
  }
  fail("unsupported architecture '{}' (supported: {})", config.architecture,
       fmt::join(supported_architectures(), ", "));
}

const char* hf_activation_name(HfActivation activation) {
  return activation == HfActivation::gelu_pytorch_tanh ? "gelu_pytorch_tanh" : "silu";
}

std::string hf_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      fail("dtype {} has no Hugging Face torch_dtype name (use f32, bf16 or f16)", dtype_name(dtype));
  }
}

std::optional<DType> hf_dtype(const std::string& torch_dtype) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    if (hf_dtype_name(dtype) == torch_dtype) return dtype;
  }
  return std::nullopt;
}

HfConfig parse_hf_config(std::string_view json_text, const std::string& source) {
  Json json;
  try {
    json = Json::parse(json_text);
  } catch (const Json::exception& error) {
    fail("{}: not valid JSON: {}", source, error.what());
  }
  TITAN_CHECK(json.is_object(), "{}: config is not a JSON object", source);
  const ConfigJsonReader top(json, source);

  std::string architecture;
  if (top.has("architectures")) {
    const Json& list = json["architectures"];
    TITAN_CHECK(list.is_array() && !list.empty() && list[0].is_string(),
                "{}: 'architectures' must be a non-empty list of names, got {}", source, list.dump());
    TITAN_CHECK(list.size() == 1, "{}: 'architectures' lists {} models; titan converts one: {}", source, list.size(),
                list.dump());
    architecture = list[0].get<std::string>();
  }
  const std::string model_type = top.get_string("model_type");
  TITAN_CHECK(!architecture.empty() || !model_type.empty(),
              "{}: neither 'architectures' nor 'model_type' says which model this is", source);
  const HfFamily* family = nullptr;
  for (const HfFamily& candidate : hf_families()) {
    if (architecture.empty() ? candidate.model_type == model_type : candidate.architecture == architecture) {
      family = &candidate;
    }
  }
  TITAN_CHECK(family != nullptr, "{}: unsupported {} '{}' (supported: {})", source,
              architecture.empty() ? "model_type" : "architecture", architecture.empty() ? model_type : architecture,
              fmt::join(supported_architectures(), ", "));
  TITAN_CHECK(model_type.empty() || model_type == family->model_type,
              "{}: unsupported model_type '{}' for architecture {} (expected '{}')", source, model_type,
              family->architecture, family->model_type);

  // A multimodal model's decoder keys sit in text_config; errors name it.
  const bool nested = !family->text_model_type.empty();
  TITAN_CHECK(!nested || (json.contains("text_config") && json["text_config"].is_object()),
              "{}: 'text_config' must be an object holding the text model's keys ({} keeps them there)", source,
              family->architecture);
  const Json& body = nested ? json["text_config"] : json;
  const std::string body_source = nested ? source + " text_config" : source;
  const ConfigJsonReader reader(body, body_source);

  HfConfig config = family->defaults;
  config.architecture = family->architecture;
  config.model_type = family->model_type;
  if (nested) read_multimodal_keys(json, top, reader, source, *family, config);
  check_known_keys(body, body_source, *family);
  reader.get_required("hidden_size", config.hidden_size, kMaxDimension);
  // Qwen3.5's mixture-of-experts form has no dense layer, and no intermediate_size key.
  if (family->joined_experts) {
    reader.get_positive("intermediate_size", config.intermediate_size, kMaxDimension);
  } else {
    reader.get_required("intermediate_size", config.intermediate_size, kMaxDimension);
  }
  reader.get_required("num_hidden_layers", config.num_hidden_layers, kMaxLayers);
  reader.get_required("num_attention_heads", config.num_attention_heads, kMaxDimension);
  reader.get_positive("num_key_value_heads", config.num_key_value_heads, kMaxDimension);
  reader.get_positive("head_dim", config.head_dim, kMaxDimension);
  reader.get_required("vocab_size", config.vocab_size, kMaxDimension);
  reader.get_positive("max_position_embeddings", config.max_position_embeddings, kMaxPositions);
  reader.get("rms_norm_eps", config.rms_norm_eps);
  reader.get("rope_theta", config.rope_theta);
  reader.get("tie_word_embeddings", config.tie_word_embeddings);
  read_partial_rotary_factor(reader, "partial_rotary_factor", body_source, *family, config.partial_rotary_factor);
  read_rope_scaling(body, body_source, *family, config);
  if (family->local_rope) reader.get("rope_local_base_freq", config.rope_local_base_freq);
  read_rope_parameters(body, body_source, *family, config);
  // Newer transformers write "dtype", older "torch_dtype" (a multimodal model's at the top level).
  const ConfigJsonReader& dtype_reader = top.has("torch_dtype") || top.has("dtype") ? top : reader;
  const std::string dtype =
      dtype_reader.has("torch_dtype") ? dtype_reader.get_string("torch_dtype") : dtype_reader.get_string("dtype");
  TITAN_CHECK(dtype.empty() || hf_dtype(dtype).has_value(),
              "{}: torch_dtype '{}' is not supported (float32, bfloat16, float16)", source, dtype);
  config.torch_dtype = dtype;

  read_activation(reader, source, *family);
  // Quantised weights titan decodes on load: gpt-oss's MXFP4 experts, nothing else.
  if (reader.has("quantization_config") || (nested && top.has("quantization_config"))) {
    const Json& quantization =
        reader.has("quantization_config") ? body["quantization_config"] : json["quantization_config"];
    const std::string method =
        quantization.is_object() && quantization.contains("quant_method") && quantization["quant_method"].is_string()
            ? quantization["quant_method"].get<std::string>()
            : quantization.dump();
    TITAN_CHECK(family->stacked_experts && method == "mxfp4",
                "{}: 'quantization_config' with quant_method '{}' is not supported for {} (titan reads full-precision "
                "weights{})",
                source, method, family->architecture, family->stacked_experts ? ", and MXFP4 expert weights" : "");
  }
  // Features titan's decoder lacks: each must be off. Qwen 2's q/k/v biases always exist (its config has no
  // attention_bias key); a family that slides by its own rule has no use_sliding_window switch.
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"})
    reader.require_zero(key, family->architecture);
  reader.require_off("mlp_bias", family->architecture);
  if (!family->qkv_bias) reader.require_off("attention_bias", family->architecture);
  if (family->sliding == HfSlidingLayers::none) reader.require_off("use_sliding_window", family->architecture);
  for (const std::string& key : family->disabled_features) reader.require_off(key.c_str(), family->architecture);

  if (family->latent_attention) {
    read_latent_attention(body, reader, body_source, *family, config);
  } else if (family->stacked_experts) {
    read_stacked_experts(reader, source, config);
  } else if (family->mixture_of_experts) {
    read_mixture_of_experts(reader, source, *family, config);
  } else if (family->gated_delta_net) {
    read_linear_attention(body, reader, body_source, *family, config);
  }
  read_sliding_window(body, reader, body_source, *family, config);
  if (family->score_scale_and_softcaps) read_score_scale_and_softcaps(reader, config);
  if (family->gated_attention) read_gated_attention(body, reader, body_source, *family, config);

  const int64_t heads = config.num_attention_heads;
  const int64_t kv_heads = config.num_key_value_heads > 0 ? config.num_key_value_heads : heads;
  TITAN_CHECK(heads % kv_heads == 0, "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source,
              heads, kv_heads);
  TITAN_CHECK(config.head_dim > 0 || config.hidden_size % heads == 0,
              "{}: hidden_size {} is not a multiple of num_attention_heads {} (and no head_dim is given)", source,
              config.hidden_size, heads);
  // Latent attention's heads rotate qk_rope_head_dim features (transformers sets head_dim to it).
  if (config.mla) {
    TITAN_CHECK(config.head_dim == 0 || config.head_dim == config.mla->qk_rope_head_dim,
                "{}: head_dim {} must be qk_rope_head_dim {} (the rotated features of latent attention)", source,
                config.head_dim, config.mla->qk_rope_head_dim);
    config.head_dim = config.mla->qk_rope_head_dim;
  }
  const int64_t head_dim = config.head_dim > 0 ? config.head_dim : config.hidden_size / heads;
  TITAN_CHECK(head_dim % 2 == 0, "{}: head_dim {} must be even for rotary embeddings", source, head_dim);
  // transformers rotates int(head_dim * partial_rotary_factor) features, in pairs.
  const auto rotary = static_cast<int64_t>(static_cast<double>(head_dim) * config.partial_rotary_factor);
  TITAN_CHECK(rotary > 0 && rotary % 2 == 0,
              "{}: partial_rotary_factor {} rotates {} of head_dim {} features; it must be an even number > 0", source,
              config.partial_rotary_factor, rotary, head_dim);
  if (config.rope_scaling.type == ops::RopeScalingType::longrope) {
    TITAN_CHECK(static_cast<int64_t>(config.rope_scaling.short_factor.size()) == rotary / 2 &&
                    static_cast<int64_t>(config.rope_scaling.long_factor.size()) == rotary / 2,
                "{}: longrope's short_factor and long_factor must hold rotary_dim / 2 = {} numbers each, got {} and {}",
                source, rotary / 2, config.rope_scaling.short_factor.size(), config.rope_scaling.long_factor.size());
  }
  // Implied sizes made explicit, as the writer writes them, so that written text parses back to this config.
  config.num_key_value_heads = kv_heads;
  config.head_dim = head_dim;
  return config;
}

namespace hf_config_writer {

// The rope_scaling object of `s`: the keys its type reads, each derived default written out.
nlohmann::ordered_json rope_scaling_json(const ops::RopeScaling& s) {
  using ops::RopeScalingType;
  using OrderedJson = nlohmann::ordered_json;
  if (s.type == RopeScalingType::none) return OrderedJson(nullptr);
  OrderedJson json;
  json["rope_type"] = ops::rope_scaling_type_name(s.type);
  json["factor"] = s.factor;
  switch (s.type) {
    case RopeScalingType::none:
    case RopeScalingType::linear:
    case RopeScalingType::dynamic:  // its original length is max_position_embeddings
      break;
    case RopeScalingType::llama3:
      json["low_freq_factor"] = s.low_freq_factor;
      json["high_freq_factor"] = s.high_freq_factor;
      json["original_max_position_embeddings"] = s.original_max_position;
      break;
    case RopeScalingType::yarn:
      json["original_max_position_embeddings"] = s.original_max_position;
      json["beta_fast"] = s.beta_fast;
      json["beta_slow"] = s.beta_slow;
      if (s.mscale > 0) json["mscale"] = s.mscale;
      if (s.mscale_all_dim > 0) json["mscale_all_dim"] = s.mscale_all_dim;
      if (!s.truncate) json["truncate"] = false;
      if (s.attention_factor > 0) json["attention_factor"] = s.attention_factor;
      break;
    case RopeScalingType::longrope:
      json["original_max_position_embeddings"] = s.original_max_position;
      if (s.attention_factor > 0) json["attention_factor"] = s.attention_factor;
      json["short_factor"] = s.short_factor;
      json["long_factor"] = s.long_factor;
      break;
  }
  return json;
}

}  // namespace hf_config_writer

HfConfig read_hf_config_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  TITAN_CHECK(file.good(), "cannot open '{}'", path);
  std::ostringstream text;
  text << file.rdbuf();
  return parse_hf_config(text.str(), path);
}

std::string hf_config_json(const HfConfig& config) {
  const HfFamily& family = hf_family(config);
  using OrderedJson = nlohmann::ordered_json;
  OrderedJson json;
  json["architectures"] = {config.architecture};
  json["model_type"] = config.model_type;
  json["hidden_size"] = config.hidden_size;
  if (!family.joined_experts) json["intermediate_size"] = config.intermediate_size;
  json["num_hidden_layers"] = config.num_hidden_layers;
  json["num_attention_heads"] = config.num_attention_heads;
  json["num_key_value_heads"] =
      config.num_key_value_heads > 0 ? config.num_key_value_heads : config.num_attention_heads;
  json["head_dim"] = config.head_dim > 0 ? config.head_dim : config.hidden_size / config.num_attention_heads;
  json["vocab_size"] = config.vocab_size;
  json["max_position_embeddings"] = config.max_position_embeddings;
  json["rms_norm_eps"] = config.rms_norm_eps;
  if (family.writes_rope_parameters) {
    OrderedJson rope = hf_config_writer::rope_scaling_json(config.rope_scaling);
    if (rope.is_null()) rope = OrderedJson{{"rope_type", "default"}};
    rope["rope_theta"] = config.rope_theta;
    if (family.gated_delta_net) {
      // As Qwen3.5's files have it: the rotated fraction and the multimodal sections inside.
      rope["partial_rotary_factor"] = config.partial_rotary_factor;
      if (config.linear_attention && !config.linear_attention->mrope_section.empty()) {
        rope["mrope_section"] = config.linear_attention->mrope_section;
      }
      if (config.linear_attention && config.linear_attention->mrope_interleaved) {
        rope["mrope_interleaved"] = *config.linear_attention->mrope_interleaved;
      }
    }
    json["rope_parameters"] = rope;
  } else {
    json["rope_theta"] = config.rope_theta;
    json["rope_scaling"] = hf_config_writer::rope_scaling_json(config.rope_scaling);
  }
  if (config.partial_rotary_factor != 1.0 && !family.gated_delta_net) {
    json["partial_rotary_factor"] = config.partial_rotary_factor;
  }
  if (config.rope_scaling.type == ops::RopeScalingType::longrope && family.top_level_original_max_position) {
    json["original_max_position_embeddings"] = config.rope_scaling.original_max_position;
  }
  json["tie_word_embeddings"] = config.tie_word_embeddings;
  if (family.latent_attention && config.mla) {
    const HfLatentAttention& m = *config.mla;
    json["q_lora_rank"] = m.q_lora_rank > 0 ? OrderedJson(m.q_lora_rank) : OrderedJson(nullptr);
    json["kv_lora_rank"] = m.kv_lora_rank;
    json["qk_nope_head_dim"] = m.qk_nope_head_dim;
    json["qk_rope_head_dim"] = m.qk_rope_head_dim;
    json["v_head_dim"] = m.v_head_dim;
    json["n_routed_experts"] = config.num_experts;
    json["n_shared_experts"] = m.n_shared_experts;
    json["num_experts_per_tok"] = config.num_experts_per_tok;
    json["moe_intermediate_size"] = config.moe_intermediate_size;
    json["routed_scaling_factor"] = m.routed_scaling_factor;
    json["n_group"] = m.n_group;
    json["topk_group"] = m.topk_group;
    json["first_k_dense_replace"] = m.first_k_dense_replace;
    if (m.num_nextn_predict_layers > 0) json["num_nextn_predict_layers"] = m.num_nextn_predict_layers;
    json["norm_topk_prob"] = config.norm_topk_prob;
    json["rope_interleave"] = true;
  } else if (family.stacked_experts) {
    json["num_local_experts"] = config.num_experts;
    json["num_experts_per_tok"] = config.num_experts_per_tok;
    json["router_aux_loss_coef"] = config.router_aux_loss_coef;
    json["output_router_logits"] = config.output_router_logits;
    json["swiglu_alpha"] = config.swiglu_alpha;
    json["swiglu_limit"] = config.swiglu_limit;
    json["attention_bias"] = true;
  } else if (family.mixture_of_experts) {
    json["num_experts"] = config.num_experts;
    json["num_experts_per_tok"] = config.num_experts_per_tok;
    json["moe_intermediate_size"] = config.moe_intermediate_size;
    json["norm_topk_prob"] = config.norm_topk_prob;
    json["decoder_sparse_step"] = config.decoder_sparse_step;
    json["mlp_only_layers"] = config.mlp_only_layers;
    json["router_aux_loss_coef"] = config.router_aux_loss_coef;
    json["output_router_logits"] = config.output_router_logits;
  } else if (family.gated_delta_net && config.linear_attention) {
    const HfLinearAttention& m = *config.linear_attention;
    json["linear_conv_kernel_dim"] = m.conv_kernel_dim;
    json["linear_key_head_dim"] = m.key_head_dim;
    json["linear_value_head_dim"] = m.value_head_dim;
    json["linear_num_key_heads"] = m.num_key_heads;
    json["linear_num_value_heads"] = m.num_value_heads;
    std::vector<std::string> types;
    for (bool linear : m.linear_layers) types.emplace_back(linear ? "linear_attention" : "full_attention");
    json["layer_types"] = types;
    if (family.joined_experts) {
      json["num_experts"] = config.num_experts;
      json["num_experts_per_tok"] = config.num_experts_per_tok;
      json["moe_intermediate_size"] = config.moe_intermediate_size;
      json["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
      json["router_aux_loss_coef"] = config.router_aux_loss_coef;
      json["output_router_logits"] = config.output_router_logits;
    }
  }
  if (family.sliding != HfSlidingLayers::none) {
    json["sliding_window"] = config.sliding_window > 0 ? OrderedJson(config.sliding_window) : OrderedJson(nullptr);
    if (family.sliding == HfSlidingLayers::pattern) json["sliding_window_pattern"] = config.sliding_window_pattern;
    // Gemma's configs have layer_types (newer transformers); elsewhere it is written only where the file read
    // had a pattern the family's rule does not give.
    const bool rule =
        config.sliding_layers == hf_sliding_rule(family, config.num_hidden_layers, config.sliding_window_pattern);
    if (config.sliding_window > 0 && (family.writes_layer_types || !rule)) {
      std::vector<std::string> types;
      for (bool sliding : config.sliding_layers) types.emplace_back(sliding ? "sliding_attention" : "full_attention");
      json["layer_types"] = types;
    }
  }
  if (family.score_scale_and_softcaps) {
    const auto cap = [](double value) { return value > 0 ? OrderedJson(value) : OrderedJson(nullptr); };
    json["query_pre_attn_scalar"] = config.query_pre_attn_scalar;
    json["attn_logit_softcapping"] = cap(config.attn_logit_softcapping);
    json["final_logit_softcapping"] = cap(config.final_logit_softcapping);
  }
  if (family.local_rope) json["rope_local_base_freq"] = config.rope_local_base_freq;
  if (family.gated_attention) {
    json["qk_scale_factor"] = config.qk_scale_factor;
    json["output_multiplier"] = config.output_multiplier;
    json["post_norm_eps"] = config.post_norm_eps;
    json["final_logit_softcapping"] = config.final_logit_softcapping;
    std::vector<double> thetas;
    for (bool nope : config.nope_layers) thetas.push_back(nope ? 0.0 : config.rope_theta);
    json["layer_rope_theta"] = thetas;
  }
  if (!config.torch_dtype.empty()) json["torch_dtype"] = config.torch_dtype;
  json[family.activation_key] = hf_activation_name(family.activation);
  for (const std::string& key : family.disabled_features) json[key] = false;
  if (family.text_model_type.empty()) return json.dump(2) + "\n";
  // A multimodal model: these keys are its text_config, beside the vision keys kept from the file read.
  json.erase("architectures");
  json.erase("torch_dtype");
  json["model_type"] = family.text_model_type;
  OrderedJson outer;
  outer["architectures"] = {config.architecture};
  outer["model_type"] = config.model_type;
  outer["text_config"] = json;
  if (!config.multimodal_keys.empty()) {
    const OrderedJson kept = OrderedJson::parse(config.multimodal_keys);
    for (const auto& [key, value] : kept.items()) outer[key] = value;
  }
  outer["tie_word_embeddings"] = config.tie_word_embeddings;
  if (!config.torch_dtype.empty()) outer["torch_dtype"] = config.torch_dtype;
  return outer.dump(2) + "\n";
}

}  // namespace titan::models
