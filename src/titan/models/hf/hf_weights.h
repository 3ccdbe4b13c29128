// Loading a Hugging Face folder's weights into a built titan model, e.g. for
// checkpoint.initial_load_path pointing at an HF download.
#pragma once

#include <string>

#include "titan/models/decoder.h"

namespace titan::models {

// Copies the folder's weights into `model` (cast to its parameter dtype).
// The folder's config.json must describe the same weights as model.config
// (the error lists every differing field); call before parallelize shards or
// casts the parameters.
void load_hf_weights_into(models::Decoder& model, const std::string& folder);

}  // namespace titan::models
