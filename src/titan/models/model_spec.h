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
int64_t parameter_count(const DecoderConfig& config);

const ModelSpec& model_spec(const std::string& name);
std::vector<std::string> model_names();
DecoderConfig model_config(const std::string& name, const std::string& flavor, int64_t vocab_size = 0);

}  // namespace titan::models
