// Loading a Hugging Face folder's weights into a built titan model, e.g. for
// checkpoint.initial_load_path pointing at an HF download.
#pragma once

#include <string>

#include "titan/models/decoder.h"

namespace titan::models {

// Copies the folder's weights into `model` (cast to its parameter dtype).
// The folder's config.json must describe the same weights as model.config
// (the error lists every differing field). A model that parallelism has cut
// into this rank's shards (nn::ShardLayout) reads only those shards' bytes,
// and holds at most one tensor's shard besides them while it loads (read in
// the file's dtype, then cast); a pipeline stage reads only its own layers.
// LoRA adapters keep their values.
void load_hf_weights_into(models::Decoder& model, const std::string& folder);

}  // namespace titan::models
