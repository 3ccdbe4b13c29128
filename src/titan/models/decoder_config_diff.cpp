#include "titan/models/decoder_config_diff.h"

#include <fmt/format.h>

#include <algorithm>

#include "titan/models/model_spec.h"

namespace titan::models {

namespace {

const char* rope_style_name(ops::RopeStyle style) {
  return style == ops::RopeStyle::interleaved ? "interleaved" : "half";
}

template <typename T>
void compare(std::vector<std::string>& out, const char* field, const T& a, const T& b) {
  if (a != b) out.push_back(fmt::format("{}: {} vs {}", field, a, b));
}

}  // namespace

namespace {

// A difference in layer `layer` is named "field" when every layer differs the
// same way (the usual case: one hyper-parameter changed), else "layer N field".
void compare_layers(std::vector<std::string>& out, const DecoderConfig& a, const DecoderConfig& b) {
  std::vector<std::vector<std::string>> per_layer;
  for (size_t i = 0; i < a.layers.size(); ++i) {
    std::vector<std::string> d;
    const nn::TransformerBlockConfig &p = a.layers[i], &q = b.layers[i];
    const auto &x = p.attention, &y = q.attention;
    compare(d, "dim", x.dim, y.dim);
    compare(d, "n_heads", x.n_heads, y.n_heads);
    compare(d, "n_kv_heads", x.kv_heads(), y.kv_heads());
    compare(d, "head_dim", x.head_size(), y.head_size());
    compare(d, "qk_norm", x.qk_norm, y.qk_norm);
    compare(d, "norm_eps", p.norm_eps, q.norm_eps);
    if (x.qk_norm && y.qk_norm) compare(d, "q/k norm_eps", x.norm_eps, y.norm_eps);
    compare(d, "rope_style", std::string(rope_style_name(x.rope_style)), std::string(rope_style_name(y.rope_style)));
    compare(d, "rope", x.rope, y.rope);
    compare(d, "rotary_dim", x.rotary_size(), y.rotary_size());
    compare(d, "sliding_window", x.sliding_window, y.sliding_window);
    compare(d, "qk_norm_whole_projection", x.qk_norm_whole_projection, y.qk_norm_whole_projection);
    compare(d, "qk_norm_weight_offset", x.qk_norm_weight_offset, y.qk_norm_weight_offset);
    compare(d, "qkv_bias", x.qkv_bias, y.qkv_bias);
    compare(d, "output_bias", x.output_bias, y.output_bias);
    compare(d, "local_rope", x.local_rope, y.local_rope);
    compare(d, "scale_dim", x.scale_dim, y.scale_dim);
    compare(d, "logit_softcap", x.logit_softcap, y.logit_softcap);
    compare(d, "qk_norm_learnable", x.qk_norm_learnable, y.qk_norm_learnable);
    compare(d, "query_scale", x.query_scale, y.query_scale);
    compare(d, "output_gate", x.output_gate, y.output_gate);
    compare(d, "sinks", x.sinks, y.sinks);
    compare(d, "post_norm_eps", p.post_norm_eps, q.post_norm_eps);
    compare(d, "norm_weight_offset", p.norm_weight_offset, q.norm_weight_offset);
    compare(d, "pre_norms", p.pre_norms, q.pre_norms);
    compare(d, "post_norms", p.post_norms, q.post_norms);
    compare(d, "latent attention", p.mla.has_value(), q.mla.has_value());
    if (p.mla && q.mla) {
      compare(d, "q_lora_rank", p.mla->q_lora_rank, q.mla->q_lora_rank);
      compare(d, "kv_lora_rank", p.mla->kv_lora_rank, q.mla->kv_lora_rank);
      compare(d, "qk_nope_head_dim", p.mla->qk_nope_head_dim, q.mla->qk_nope_head_dim);
      compare(d, "qk_rope_head_dim", p.mla->qk_rope_head_dim, q.mla->qk_rope_head_dim);
      compare(d, "v_head_dim", p.mla->v_head_dim, q.mla->v_head_dim);
      compare(d, "softmax_scale", p.mla->scale(), q.mla->scale());
    }
    compare(d, "mixture of experts", p.moe.has_value(), q.moe.has_value());
    if (!p.moe && !q.moe) {
      compare(d, "ffn hidden_dim", p.feed_forward.hidden_dim, q.feed_forward.hidden_dim);
      compare(d, "ffn activation", static_cast<int>(p.feed_forward.activation),
              static_cast<int>(q.feed_forward.activation));
    }
    if (p.moe && q.moe) {
      compare(d, "experts", p.moe->num_experts, q.moe->num_experts);
      compare(d, "experts per token", p.moe->top_k, q.moe->top_k);
      compare(d, "expert hidden_dim", p.moe->hidden_dim, q.moe->hidden_dim);
      compare(d, "shared experts", p.moe->num_shared_experts, q.moe->num_shared_experts);
      compare(d, "normalize_top_k", p.moe->normalize_top_k, q.moe->normalize_top_k);
      compare(d, "router score", static_cast<int>(p.moe->score), static_cast<int>(q.moe->score));
      compare(d, "route_scale", p.moe->route_scale, q.moe->route_scale);
      compare(d, "expert groups", p.moe->num_expert_groups, q.moe->num_expert_groups);
      compare(d, "limited groups", p.moe->num_limited_groups, q.moe->num_limited_groups);
      compare(d, "router bias", p.moe->router_bias, q.moe->router_bias);
      compare(d, "expert biases", p.moe->expert_biases, q.moe->expert_biases);
      compare(d, "expert activation", static_cast<int>(p.moe->activation), static_cast<int>(q.moe->activation));
      compare(d, "swiglu_alpha", p.moe->swiglu_alpha, q.moe->swiglu_alpha);
      compare(d, "swiglu_limit", p.moe->swiglu_limit, q.moe->swiglu_limit);
    }
    per_layer.push_back(std::move(d));
  }
  const bool uniform =
      std::all_of(per_layer.begin(), per_layer.end(), [&](const auto& d) { return d == per_layer.front(); });
  if (uniform && !per_layer.empty()) {
    for (const std::string& d : per_layer.front()) out.push_back(d);
    return;
  }
  for (size_t i = 0; i < per_layer.size(); ++i) {
    for (const std::string& d : per_layer[i]) out.push_back(fmt::format("layer {} {}", i, d));
  }
}

// The type, then the fields that type reads.
void compare_rope_scaling(std::vector<std::string>& out, const ops::RopeScaling& a, const ops::RopeScaling& b) {
  using ops::RopeScalingType;
  compare(out, "rope_scaling.type", std::string(ops::rope_scaling_type_name(a.type)),
          std::string(ops::rope_scaling_type_name(b.type)));
  if (a.type != b.type || a.type == RopeScalingType::none) return;
  const RopeScalingType type = a.type;
  if (type != RopeScalingType::longrope) compare(out, "rope_scaling.factor", a.factor, b.factor);
  compare(out, "rope_scaling.original_max_position", a.original_max_position, b.original_max_position);
  if (type == RopeScalingType::llama3) {
    compare(out, "rope_scaling.low_freq_factor", a.low_freq_factor, b.low_freq_factor);
    compare(out, "rope_scaling.high_freq_factor", a.high_freq_factor, b.high_freq_factor);
  }
  if (type == RopeScalingType::yarn) {
    compare(out, "rope_scaling.beta_fast", a.beta_fast, b.beta_fast);
    compare(out, "rope_scaling.beta_slow", a.beta_slow, b.beta_slow);
    compare(out, "rope_scaling.mscale", a.mscale, b.mscale);
    compare(out, "rope_scaling.mscale_all_dim", a.mscale_all_dim, b.mscale_all_dim);
    compare(out, "rope_scaling.truncate", a.truncate, b.truncate);
  }
  if (type == RopeScalingType::yarn || type == RopeScalingType::longrope) {
    compare(out, "rope_scaling.attention factor", ops::rope_attention_factor(a), ops::rope_attention_factor(b));
  }
  if (type == RopeScalingType::longrope) {
    if (a.short_factor != b.short_factor) out.emplace_back("rope_scaling.short_factor differs");
    if (a.long_factor != b.long_factor) out.emplace_back("rope_scaling.long_factor differs");
  }
}

}  // namespace

std::vector<std::string> decoder_config_differences(const DecoderConfig& a, const DecoderConfig& b) {
  std::vector<std::string> out;
  compare(out, "vocab_size", a.vocab_size, b.vocab_size);
  compare(out, "n_layers", a.n_layers(), b.n_layers());
  if (a.n_layers() == b.n_layers()) compare_layers(out, a, b);
  compare(out, "rope_theta", a.rope_theta, b.rope_theta);
  compare_rope_scaling(out, a.rope_scaling, b.rope_scaling);
  compare(out, "local_rope_theta", a.local_rope_theta, b.local_rope_theta);
  compare(out, "embedding_scale", a.embedding_scale, b.embedding_scale);
  compare(out, "final logit softcap", a.loss.softcap, b.loss.softcap);
  compare(out, "embedding_norm_eps", a.embedding_norm_eps, b.embedding_norm_eps);
  compare(out, "output_multiplier", a.output_multiplier, b.output_multiplier);
  compare(out, "final norm", a.final_norm.has_value(), b.final_norm.has_value());
  compare(out, "tie_embeddings", a.tie_embeddings, b.tie_embeddings);
  return out;
}

std::string matching_flavor(const std::string& model, const DecoderConfig& config) {
  const ModelSpec& spec = model_spec(model);
  for (const std::string& flavor : spec.flavors) {
    if (decoder_config_differences(spec.config(flavor, config.vocab_size), config).empty()) return flavor;
  }
  return "custom";
}

}  // namespace titan::models
