// A trained model written so it can be looked at and reused: model weights in
// safetensors (in a chosen dtype), the job config that built it, and a copy of
// its tokenizer. Written to a temporary folder and renamed into place, so a
// reader never sees a half-written export.
#pragma once

#include <memory>
#include <string>

#include "titan/models/decoder.h"
#include "titan/train/job_config.h"

namespace titan::train {

void export_model(models::Decoder& model, const JobConfig& config, const std::string& folder, DType dtype);
// The export's files (model.safetensors, job.toml, the tokenizer) written into an existing folder.
void write_model_export(models::Decoder& model, const JobConfig& config, const std::string& folder, DType dtype);

struct ExportedModel {
  JobConfig config;
  std::shared_ptr<models::Decoder> model;
  std::string tokenizer;  // what data::load_tokenizer takes (a file in the export, or a built-in name)
};

// Loads an export (or any folder with job.toml + model.safetensors); errors
// name the folder and the missing or mismatching file or tensor.
ExportedModel load_exported_model(const std::string& folder);

}  // namespace titan::train
