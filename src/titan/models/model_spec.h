// The model registry: what each family registers, and the only way the
// trainer, `convert`, `generate` and `estimate-memory` reach a model. A new
// family is a folder under models/ plus its line in models/families.h.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "titan/models/decoder.h"
#include "titan/models/decoder_size.h"
#include "titan/models/hf/hf_config.h"
#include "titan/models/memory_estimate.h"
#include "titan/models/parallelize_decoder.h"

namespace titan::models {

struct ModelSpec {
  std::string name;
  std::vector<std::string> flavors;
  // The config tree of `flavor` (one block config per layer) with the given
  // vocabulary size (0 = the flavor's own).
  std::function<DecoderConfig(const std::string& flavor, int64_t vocab_size)> config;
  // The single-device model of a config.
  std::function<std::shared_ptr<Decoder>(const DecoderConfig& config, Device device)> build;
  // Tensor, sequence and expert parallelism, activation checkpointing, FSDP
  // or mixed precision, applied to a built model.
  std::function<parallel::ParallelizedModel(Decoder& model, const comm::DeviceMesh& mesh,
                                            const ParallelizeOptions& options)>
      parallelize;
  // The model's top-level modules in forward order ("tok_embeddings",
  // "layers.0", ..., "norm", "output"): the units a pipeline split hands to stages.
  std::function<std::vector<std::string>(const DecoderConfig& config)> module_fqns;
  // Forward + backward FLOPs per token (active parameters for MoE), for MFU.
  std::function<double(const DecoderConfig& config, int64_t seq_len)> flops_per_token;
  std::function<MemoryEstimate(const DecoderConfig& config, const MemoryEstimateOptions& options)> memory_estimate;
  // Hugging Face interop (names, layouts and config.json both ways); null when the family has none.
  HfFamily (*hf_family)() = nullptr;
  // Its flavors are published config.json texts (make_hf_model_spec): the
  // model is exactly what Hugging Face's config describes, and the
  // Hugging Face reference (tests/reference/hf_families.py) is its parity.
  bool from_hf_config = false;
};

// The decoder's top-level modules in forward order (ModelSpec::module_fqns of every family so far).
std::vector<std::string> decoder_module_fqns(const DecoderConfig& config);

// The parts every decoder family shares: the builder, parallelize plan,
// module list, FLOPs and memory estimate (flavors and config left to the family).
ModelSpec decoder_model_spec(std::string name, HfFamily (*hf_family)());

// A family's spec from its table of named hyper-parameters (each Args has a
// vocab_size) and its Args -> DecoderConfig conversion.
template <typename Args>
ModelSpec make_model_spec(std::string name, const std::map<std::string, Args>& (*flavors)(),
                          DecoderConfig (*to_config)(const Args&), HfFamily (*hf_family)()) {
  ModelSpec spec = decoder_model_spec(std::move(name), hf_family);
  for (const auto& [flavor, args] : flavors()) spec.flavors.push_back(flavor);
  spec.config = [flavors, to_config](const std::string& flavor, int64_t vocab_size) {
    Args args = flavors().at(flavor);
    if (vocab_size > 0) args.vocab_size = vocab_size;
    return to_config(args);
  };
  return spec;
}

// A family defined by Hugging Face's config.json: each flavor is the published
// config.json text (the keys that define the model), read by the same parser
// as any checkpoint's, and the model is what decoder_config_from_hf builds.
ModelSpec make_hf_model_spec(std::string name, const std::map<std::string, std::string>& (*flavors)(),
                             HfFamily (*hf_family)());

const ModelSpec& model_spec(const std::string& name);
std::vector<std::string> model_names();
DecoderConfig model_config(const std::string& name, const std::string& flavor, int64_t vocab_size = 0);

}  // namespace titan::models
