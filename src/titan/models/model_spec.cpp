#include "titan/models/model_spec.h"

#include <algorithm>

#include "titan/models/families.h"
#include "titan/models/hf/hf_decoder_config.h"

namespace titan::models {

// Each family's entry point, declared from the list (its folder defines it).
#define TITAN_DECLARE_FAMILY_SPEC(name) \
  namespace name {                      \
  ModelSpec spec();                     \
  }
TITAN_MODEL_FAMILIES(TITAN_DECLARE_FAMILY_SPEC)
TITAN_NATIVE_MODEL_FAMILIES(TITAN_DECLARE_FAMILY_SPEC)
#undef TITAN_DECLARE_FAMILY_SPEC

std::vector<std::string> decoder_module_fqns(const DecoderConfig& config) {
  std::vector<std::string> fqns{"tok_embeddings"};
  for (int64_t i = 0; i < config.n_layers(); ++i) fqns.push_back("layers." + std::to_string(i));
  fqns.push_back("norm");
  if (!config.tie_embeddings) fqns.push_back("output");
  return fqns;
}

ModelSpec decoder_model_spec(std::string name, HfFamily (*hf_family)()) {
  ModelSpec spec;
  spec.name = std::move(name);
  spec.build = [](const DecoderConfig& config, Device device) { return config.build(device); };
  spec.parallelize = parallelize_decoder;
  spec.module_fqns = decoder_module_fqns;
  spec.flops_per_token = training_flops_per_token;
  spec.memory_estimate = estimate_memory;
  spec.hf_family = hf_family;
  return spec;
}

ModelSpec make_hf_model_spec(std::string name, const std::map<std::string, std::string>& (*flavors)(),
                             HfFamily (*hf_family)()) {
  ModelSpec spec = decoder_model_spec(std::move(name), hf_family);
  spec.from_hf_config = true;
  for (const auto& [flavor, json] : flavors()) spec.flavors.push_back(flavor);
  spec.config = [flavors, model = spec.name](const std::string& flavor, int64_t vocab_size) {
    HfConfig hf = parse_hf_config(flavors().at(flavor), fmt::format("{} flavor {}", model, flavor));
    if (vocab_size > 0) hf.vocab_size = vocab_size;
    return decoder_config_from_hf(hf);
  };
  return spec;
}

namespace {
const std::vector<ModelSpec>& registry() {
#define TITAN_FAMILY_SPEC(name) name::spec(),
  static const std::vector<ModelSpec> specs{TITAN_MODEL_FAMILIES(TITAN_FAMILY_SPEC)
                                                TITAN_NATIVE_MODEL_FAMILIES(TITAN_FAMILY_SPEC)};
#undef TITAN_FAMILY_SPEC
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
