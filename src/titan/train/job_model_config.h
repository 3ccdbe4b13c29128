// The DecoderConfig a job config describes: a named flavor of a model family,
// or the model of a Hugging Face config.json (model.hf_config). Shared by the
// trainer and the model export, so both build the same model.
#pragma once

#include <string>

#include "titan/models/decoder.h"
#include "titan/train/job_config.h"

namespace titan::train {

// The model of `config` with vocabulary `vocab_size` (0 = the flavor's own, or
// the config.json's), its attention kernel and loss as configured, and a RoPE
// table long enough for training.seq_len. With model.hf_config (resolved
// against `base_folder` when relative), model.name and model.flavor are set
// from it: the family of its architecture, and the matching flavor or "custom".
models::DecoderConfig resolve_model_config(JobConfig& config, int64_t vocab_size, const std::string& base_folder = "");

}  // namespace titan::train
