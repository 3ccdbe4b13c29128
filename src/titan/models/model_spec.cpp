#include "titan/models/model_spec.h"

#include <algorithm>

#include "titan/models/llama3/flavors.h"
#include "titan/models/qwen3/flavors.h"

namespace titan::models {

int64_t parameter_count(const DecoderConfig& config) {
  const auto& a = config.block.attention;
  const int64_t head = a.head_size();
  const int64_t attention = config.dim() * head * (2 * a.n_heads + 2 * a.kv_heads()) + (a.qk_norm ? 2 * head : 0);
  const int64_t feed_forward = 3 * config.dim() * config.block.feed_forward.hidden_dim;
  const int64_t per_layer = attention + feed_forward + 2 * config.dim();
  const int64_t embeddings = config.vocab_size * config.dim();
  return embeddings * (config.tie_embeddings ? 1 : 2) + config.n_layers * per_layer + config.dim();
}

double training_flops_per_token(const DecoderConfig& config, int64_t seq_len) {
  const double non_embedding = static_cast<double>(parameter_count(config) - config.vocab_size * config.dim());
  const auto& a = config.block.attention;
  return 6.0 * non_embedding +
         12.0 * static_cast<double>(config.n_layers * a.n_heads * a.head_size()) * static_cast<double>(seq_len);
}

namespace {
const std::vector<ModelSpec>& registry() {
  static const std::vector<ModelSpec> specs{llama3::spec(), qwen3::spec()};
  return specs;
}
}  // namespace

const ModelSpec& model_spec(const std::string& name) {
  for (const ModelSpec& spec : registry()) {
    if (spec.name == name) return spec;
  }
  fail("unknown model '{}' (known: {})", name, fmt::join(model_names(), ", "));
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelSpec& spec : registry()) names.push_back(spec.name);
  return names;
}

DecoderConfig model_config(const std::string& name, const std::string& flavor, int64_t vocab_size) {
  const ModelSpec& spec = model_spec(name);
  TITAN_CHECK(std::find(spec.flavors.begin(), spec.flavors.end(), flavor) != spec.flavors.end(),
              "model '{}' has no flavor '{}' (known: {})", name, flavor, fmt::join(spec.flavors, ", "));
  return spec.config(flavor, vocab_size);
}

}  // namespace titan::models
