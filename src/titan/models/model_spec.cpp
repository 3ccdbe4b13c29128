#include "titan/models/model_spec.h"

#include <algorithm>

#include "titan/models/llama3/flavors.h"
#include "titan/models/qwen3/flavors.h"
#include "titan/models/qwen3_moe/flavors.h"

namespace titan::models {

std::vector<std::string> decoder_module_fqns(const DecoderConfig& config) {
  std::vector<std::string> fqns{"tok_embeddings"};
  for (int64_t i = 0; i < config.n_layers(); ++i) fqns.push_back("layers." + std::to_string(i));
  fqns.push_back("norm");
  if (!config.tie_embeddings) fqns.push_back("output");
  return fqns;
}

namespace {
const std::vector<ModelSpec>& registry() {
  static const std::vector<ModelSpec> specs{llama3::spec(), qwen3::spec(), qwen3_moe::spec()};
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
