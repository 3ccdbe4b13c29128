#include "titan/models/decoder_config_diff.h"

#include <fmt/format.h>

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

std::vector<std::string> decoder_config_differences(const DecoderConfig& a, const DecoderConfig& b) {
  std::vector<std::string> out;
  const auto &x = a.block.attention, &y = b.block.attention;
  compare(out, "vocab_size", a.vocab_size, b.vocab_size);
  compare(out, "n_layers", a.n_layers, b.n_layers);
  compare(out, "dim", x.dim, y.dim);
  compare(out, "n_heads", x.n_heads, y.n_heads);
  compare(out, "n_kv_heads", x.kv_heads(), y.kv_heads());
  compare(out, "head_dim", x.head_size(), y.head_size());
  compare(out, "qk_norm", x.qk_norm, y.qk_norm);
  compare(out, "ffn hidden_dim", a.block.feed_forward.hidden_dim, b.block.feed_forward.hidden_dim);
  compare(out, "norm_eps", a.block.norm_eps, b.block.norm_eps);
  if (x.qk_norm && y.qk_norm) compare(out, "q/k norm_eps", x.norm_eps, y.norm_eps);
  compare(out, "rope_style", std::string(rope_style_name(x.rope_style)), std::string(rope_style_name(y.rope_style)));
  compare(out, "rope_theta", a.rope_theta, b.rope_theta);
  compare(out, "rope_scaling.factor", a.rope_scaling.factor, b.rope_scaling.factor);
  if (a.rope_scaling.factor > 0 && b.rope_scaling.factor > 0) {
    compare(out, "rope_scaling.low_freq_factor", a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
    compare(out, "rope_scaling.high_freq_factor", a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
    compare(out, "rope_scaling.original_max_position", a.rope_scaling.original_max_position,
            b.rope_scaling.original_max_position);
  }
  compare(out, "tie_embeddings", a.tie_embeddings, b.tie_embeddings);
  compare(out, "sliding_window", x.sliding_window, y.sliding_window);
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
