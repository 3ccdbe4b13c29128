// What a model family registers: its named flavors, how a flavor becomes a
// DecoderConfig, and its training FLOPs per token (for the MFU metric).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "titan/models/decoder.h"

namespace titan::models {

struct ModelSpec {
  std::string name;
  std::vector<std::string> flavors;
  // The config of `flavor` with the given vocabulary size (0 = the flavor's own).
  std::function<DecoderConfig(const std::string& flavor, int64_t vocab_size)> config;
};

// Forward + backward FLOPs per token for sequence length `seq_len`, as
// TorchTitan counts them: 6 x (parameters - embedding table) for the matrix
// multiplies, plus 12 x layers x heads x head_dim x seq_len for attention
// scores and weighted sums (full square, causal masking not discounted).
double training_flops_per_token(const DecoderConfig& config, int64_t seq_len);

// A family's spec from its table of named hyper-parameters (each Args has a
// vocab_size) and its Args -> DecoderConfig conversion.
template <typename Args>
ModelSpec make_model_spec(std::string name, const std::map<std::string, Args>& (*flavors)(),
                          DecoderConfig (*to_config)(const Args&)) {
  ModelSpec spec{std::move(name), {}, nullptr};
  for (const auto& [flavor, args] : flavors()) spec.flavors.push_back(flavor);
  spec.config = [flavors, to_config](const std::string& flavor, int64_t vocab_size) {
    Args args = flavors().at(flavor);
    if (vocab_size > 0) args.vocab_size = vocab_size;
    return to_config(args);
  };
  return spec;
}
int64_t parameter_count(const DecoderConfig& config);

const ModelSpec& model_spec(const std::string& name);
std::vector<std::string> model_names();
DecoderConfig model_config(const std::string& name, const std::string& flavor, int64_t vocab_size = 0);

}  // namespace titan::models
