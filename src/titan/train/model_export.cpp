#include "titan/train/model_export.h"

#include <filesystem>
#include <fstream>

#include "titan/checkpoint/safetensors.h"
#include "titan/models/model_spec.h"
#include "titan/train/config_loader.h"

namespace titan::train {

namespace fs = std::filesystem;

namespace {

// The model exactly as the job config describes it (vocabulary already resolved into model.vocab_size).
models::DecoderConfig decoder_config(const JobConfig& config) {
  models::DecoderConfig decoder = models::model_config(config.model.name, config.model.flavor, config.model.vocab_size);
  decoder.block.attention.attention_impl = config.model.attention;
  decoder.max_seq_len = std::max(decoder.max_seq_len, config.training.seq_len);
  return decoder;
}

}  // namespace

void write_model_export(models::Decoder& model, const JobConfig& config, const std::string& folder, DType dtype) {
  const fs::path staging(folder);
  JobConfig saved = config;
  saved.model.vocab_size = model.config.vocab_size;
  const std::string& tokenizer = config.model.tokenizer_path;
  if (!tokenizer.empty() && fs::is_regular_file(tokenizer)) {
    const fs::path copy = staging / fs::path(tokenizer).filename();
    fs::copy_file(tokenizer, copy, fs::copy_options::overwrite_existing);
    saved.model.tokenizer_path = fs::path(tokenizer).filename().string();  // relative to the export
  }
  checkpoint::NamedTensors tensors;
  for (auto& [name, tensor] : model.state_dict()) tensors.emplace_back(name, tensor.to(dtype));
  checkpoint::write_safetensors((staging / "model.safetensors").string(), tensors,
                                {{"format", "titan"}, {"model", config.model.name}, {"flavor", config.model.flavor}});
  std::ofstream(staging / "job.toml") << config_to_toml(saved);
}

void export_model(models::Decoder& model, const JobConfig& config, const std::string& folder, DType dtype) {
  const fs::path target(folder);
  const fs::path staging = target.parent_path() / (target.filename().string() + ".partial");
  fs::remove_all(staging);
  fs::create_directories(staging);
  write_model_export(model, config, staging.string(), dtype);
  fs::remove_all(target);
  fs::rename(staging, target);
}

ExportedModel load_exported_model(const std::string& folder) {
  const fs::path root(folder);
  TITAN_CHECK(fs::is_directory(root), "'{}' is not a folder", folder);
  for (const char* file : {"job.toml", "model.safetensors"}) {
    TITAN_CHECK(fs::is_regular_file(root / file), "{}: missing {} (not a titan model export?)", folder, file);
  }
  ExportedModel exported;
  load_toml_file(exported.config, (root / "job.toml").string());
  TITAN_CHECK(exported.config.model.vocab_size > 0, "{}/job.toml: model.vocab_size is not set", folder);
  exported.model = decoder_config(exported.config).build();
  checkpoint::SafetensorsReader reader((root / "model.safetensors").string());
  std::map<std::string, Tensor> state;
  for (const auto& entry : reader.header().entries) state[entry.name] = reader.read(entry.name);
  try {
    exported.model->load_state_dict(state);
  } catch (const Error& error) {
    fail("{}/model.safetensors: {}", folder, error.what());
  }
  const std::string& tokenizer = exported.config.model.tokenizer_path;
  exported.tokenizer = fs::is_regular_file(root / tokenizer) ? (root / tokenizer).string() : tokenizer;
  return exported;
}

}  // namespace titan::train
