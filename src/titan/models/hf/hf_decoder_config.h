// Hugging Face interop for the decoder families: config.json <-> DecoderConfig
// here, titan FQNs <-> HF tensors and their layouts in models/hf/hf_tensor_names.h.
// The logic is shared; each family (models/<name>/hf_family.cpp) contributes only
// its HfFamily (models/hf/hf_config.h): architecture, model_type, config
// defaults, RoPE pairing, norms, sliding rule and the like.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "titan/models/decoder.h"
#include "titan/models/hf/hf_config.h"
#include "titan/models/hf/hf_tensor_names.h"

namespace titan::models {

DecoderConfig decoder_config_from_hf(const HfConfig& config);
// The config.json of `model_name`'s family for `config`; an error naming what
// when the family cannot express it (a sliding pattern its rule cannot say,
// two window sizes, biases it has not, ...).
HfConfig hf_config_from_decoder(const std::string& model_name, const DecoderConfig& config, DType dtype);

}  // namespace titan::models
