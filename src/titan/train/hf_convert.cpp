#include "titan/train/hf_convert.h"

#include <filesystem>
#include <set>

#include "titan/checkpoint/hf_folder.h"
#include "titan/train/config_loader.h"
#include "titan/train/job_model_config.h"
#include "titan/train/model_export.h"

namespace titan::train {

namespace fs = std::filesystem;

void convert_hf_to_titan(const std::string& hf_folder, const std::string& output, const ConvertOptions& options) {
  const checkpoint::HfFolderReader reader(hf_folder);
  JobConfig config;
  config.model.hf_config = (fs::path(hf_folder) / "config.json").string();
  const models::DecoderConfig decoder = resolve_model_config(config, 0);
  config.model.vocab_size = decoder.vocab_size;
  const fs::path tokenizer = fs::path(hf_folder) / "tokenizer.json";
  if (fs::is_regular_file(tokenizer)) config.model.tokenizer_path = tokenizer.string();
  std::map<std::string, Tensor> state = checkpoint::read_hf_weights(reader, decoder, options.dtype);
  checkpoint::NamedTensors tensors;
  // In the model's own order, as export_model writes it (a meta model: names and shapes only).
  const auto expected = decoder.build(Device::meta());
  for (auto& [name, parameter] : expected->named_parameters()) {
    tensors.emplace_back(name, state.at(name));
  }
  config.checkpoint.export_dtype = dtype_name(tensors.front().second.dtype());
  write_model_export(output, config, tensors);
}

void convert_titan_to_hf(const std::string& titan_folder, const std::string& output, const ConvertOptions& options) {
  const fs::path root(titan_folder);
  TITAN_CHECK(fs::is_directory(root), "'{}' is not a folder", titan_folder);
  for (const char* file : {"job.toml", "model.safetensors"}) {
    TITAN_CHECK(fs::is_regular_file(root / file), "{}: missing {} (not a titan model export?)", titan_folder, file);
  }
  JobConfig config;
  load_toml_file(config, (root / "job.toml").string());
  const models::DecoderConfig decoder = exported_model_config(config, titan_folder);
  const checkpoint::SafetensorsReader reader((root / "model.safetensors").string());
  checkpoint::NamedTensors tensors;
  std::set<std::string> expected;
  const auto model = decoder.build(Device::meta());  // names and shapes only
  for (auto& [name, parameter] : model->named_parameters()) {
    TITAN_CHECK(reader.contains(name), "{}: missing tensor '{}'", reader.path(), name);
    const checkpoint::SafetensorsEntry& entry = reader.entry(name);
    TITAN_CHECK(entry.shape == parameter->data.shape(), "{}: tensor '{}' has shape {}, but job.toml implies {}",
                reader.path(), name, shape_str(entry.shape), shape_str(parameter->data.shape()));
    tensors.emplace_back(name, reader.read(name));
    expected.insert(name);
  }
  for (const auto& entry : reader.header().entries) {
    TITAN_CHECK(expected.count(entry.name) != 0, "{}: unexpected tensor '{}' (not part of this {} {})", reader.path(),
                entry.name, config.model.name, config.model.flavor);
  }
  checkpoint::HfWriteOptions write;
  write.dtype = options.dtype.value_or(tensors.front().second.dtype());
  write.max_shard_bytes = options.max_shard_bytes;
  // HF tokenizers read tokenizer.json; a tiktoken rank file has no HF equivalent to copy.
  const fs::path tokenizer = root / config.model.tokenizer_path;
  if (!config.model.tokenizer_path.empty() && fs::is_regular_file(tokenizer) &&
      tokenizer.filename() == "tokenizer.json") {
    write.extra_files.emplace_back("tokenizer.json", tokenizer.string());
  }
  checkpoint::write_hf_folder(output, config.model.name, decoder, tensors, write);
}

}  // namespace titan::train
