// Which hyper-parameters of two decoder configs differ, for the ones that
// decide what the weights mean (shapes, RoPE, norms, tying). Used to check a
// Hugging Face folder against the model it is loaded into, and to name the
// titan flavor a config.json describes.
#pragma once

#include <string>
#include <vector>

#include "titan/models/decoder.h"

namespace titan::models {

// "field: a vs b" for each difference (empty when the weights are interchangeable).
// Ignores the RoPE table length (max_seq_len), the attention kernel and the loss.
std::vector<std::string> decoder_config_differences(const DecoderConfig& a, const DecoderConfig& b);

// The registered flavor of `model` whose shapes and settings match (at the
// config's vocabulary size), or "custom" when none does.
std::string matching_flavor(const std::string& model, const DecoderConfig& config);

}  // namespace titan::models
