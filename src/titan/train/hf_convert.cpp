#include "titan/train/hf_convert.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/checkpoint/nonfinite_weights.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/lora_plan.h"
#include "titan/train/checkpointer.h"
#include "titan/train/config_loader.h"
#include "titan/train/job_model_config.h"
#include "titan/train/model_export.h"

namespace titan::train {

namespace fs = std::filesystem;

namespace {

// The adapter of options.merge_lora added into `tensors` (titan names), in place.
void merge_lora_adapter(checkpoint::NamedTensors& tensors, const models::DecoderConfig& decoder,
                        const ConvertOptions& options) {
  if (options.merge_lora.empty()) return;
  const models::PeftAdapter adapter = models::read_peft_adapter(options.merge_lora, decoder);
  std::map<std::string, Tensor> state(tensors.begin(), tensors.end());
  models::merge_peft_adapter(state, adapter);
  for (auto& [name, tensor] : tensors) tensor = state.at(name);
}

}  // namespace

void convert_hf_to_titan(const std::string& hf_folder, const std::string& output, const ConvertOptions& options) {
  const models::HfFolderReader reader(hf_folder);
  JobConfig config;
  config.model.hf_config = (fs::path(hf_folder) / "config.json").string();
  const models::DecoderConfig decoder = resolve_model_config(config, 0);
  config.model.vocab_size = decoder.vocab_size;
  const fs::path tokenizer = fs::path(hf_folder) / "tokenizer.json";
  if (fs::is_regular_file(tokenizer)) config.model.tokenizer_path = tokenizer.string();
  std::map<std::string, Tensor> state = models::read_hf_weights(reader, decoder, options.dtype);
  checkpoint::NamedTensors tensors;
  // In the model's own order, as export_model writes it (a meta model: names and shapes only).
  const auto expected = decoder.build(Device::meta());
  for (auto& [name, tensor] : expected->named_state()) tensors.emplace_back(name, state.at(name));
  merge_lora_adapter(tensors, decoder, options);
  checkpoint::check_finite_weights(tensors, hf_folder, options.allow_nonfinite, "--allow-nonfinite");
  config.checkpoint.export_dtype = dtype_name(tensors.front().second.dtype());
  write_model_export(output, config, tensors);
}

namespace {

// A model export's model.safetensors: every tensor the model has, and nothing else.
checkpoint::NamedTensors read_export_weights(const fs::path& root, const JobConfig& config,
                                             const models::DecoderConfig& decoder) {
  const checkpoint::SafetensorsReader reader((root / "model.safetensors").string());
  checkpoint::NamedTensors tensors;
  std::set<std::string> expected;
  const auto model = decoder.build(Device::meta());  // names and shapes only
  for (auto& [name, tensor] : model->named_state()) {
    TITAN_CHECK(reader.contains(name), "{}: missing tensor '{}'", reader.path(), name);
    const checkpoint::SafetensorsEntry& entry = reader.entry(name);
    TITAN_CHECK(entry.shape == tensor.shape(), "{}: tensor '{}' has shape {}, but job.toml implies {}", reader.path(),
                name, shape_str(entry.shape), shape_str(tensor.shape()));
    tensors.emplace_back(name, reader.read(name));
    expected.insert(name);
  }
  for (const auto& entry : reader.header().entries) {
    TITAN_CHECK(expected.count(entry.name) != 0, "{}: unexpected tensor '{}' (not part of this {} {})", reader.path(),
                entry.name, config.model.name, config.model.flavor);
  }
  return tensors;
}

// A training checkpoint's step folder (no model export in it): the model's
// weights read whole from every rank's chunks, whatever mesh saved them.
checkpoint::NamedTensors read_checkpoint_weights(const fs::path& root, JobConfig& config,
                                                 models::DecoderConfig& decoder) {
  const std::string folder = root.string();
  std::ifstream file(root / "metadata.json");
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const checkpoint::CheckpointMetadata metadata =
      checkpoint::parse_checkpoint_metadata(text, (root / "metadata.json").string());
  // A job that sized its vocabulary from the tokenizer recorded 0; the embedding's rows say it.
  const auto embedding = metadata.tensors.find("model.tok_embeddings.weight");
  if (config.model.vocab_size <= 0 && embedding != metadata.tensors.end())
    config.model.vocab_size = embedding->second.shape.at(0);
  decoder = exported_model_config(config, folder);
  const auto model = decoder.build(Device::meta());  // names and shapes only
  std::vector<StateTensor> state;
  checkpoint::NamedTensors tensors;
  for (auto& [name, tensor] : model->named_state()) {
    const auto found = metadata.tensors.find("model." + name);
    TITAN_CHECK(found != metadata.tensors.end(), "{}/metadata.json: missing tensor 'model.{}'", folder, name);
    TITAN_CHECK(found->second.shape == tensor.shape(),
                "{}/metadata.json: tensor 'model.{}' has shape {}, but job.toml implies {}", folder, name,
                shape_str(found->second.shape), shape_str(tensor.shape()));
    const Tensor whole = Tensor::empty(found->second.shape, found->second.dtype);
    state.push_back({"model." + name, "model", whole, found->second.shape,
                     std::vector<int64_t>(found->second.shape.size(), 0), true});
    tensors.emplace_back(name, whole);
  }
  Checkpointer::load(folder, state, {"model"});
  return tensors;
}

}  // namespace

void convert_titan_to_hf(const std::string& titan_folder, const std::string& output, const ConvertOptions& options) {
  const fs::path root(titan_folder);
  TITAN_CHECK(fs::is_directory(root), "'{}' is not a folder", titan_folder);
  TITAN_CHECK(fs::is_regular_file(root / "job.toml"), "{}: missing job.toml (not a titan model export or checkpoint?)",
              titan_folder);
  JobConfig config;
  load_toml_file(config, (root / "job.toml").string());
  const bool training_checkpoint =
      !fs::exists(root / "model.safetensors") && fs::is_regular_file(root / "metadata.json");
  TITAN_CHECK(training_checkpoint || fs::is_regular_file(root / "model.safetensors"),
              "{}: missing model.safetensors (not a titan model export?) and metadata.json (not a checkpoint step "
              "folder?)",
              titan_folder);
  models::DecoderConfig decoder;
  checkpoint::NamedTensors tensors;
  if (training_checkpoint) {
    tensors = read_checkpoint_weights(root, config, decoder);
  } else {
    decoder = exported_model_config(config, titan_folder);
    tensors = read_export_weights(root, config, decoder);
  }
  merge_lora_adapter(tensors, decoder, options);
  checkpoint::check_finite_weights(tensors, titan_folder, options.allow_nonfinite, "--allow-nonfinite");
  models::HfWriteOptions write;
  write.dtype = options.dtype.value_or(tensors.front().second.dtype());
  write.max_shard_bytes = options.max_shard_bytes;
  // HF tokenizers read tokenizer.json; a tiktoken rank file has no HF equivalent to copy.
  const fs::path tokenizer = root / config.model.tokenizer_path;
  if (!config.model.tokenizer_path.empty() && fs::is_regular_file(tokenizer) &&
      tokenizer.filename() == "tokenizer.json") {
    write.extra_files.emplace_back("tokenizer.json", tokenizer.string());
  }
  models::write_hf_folder(output, config.model.name, decoder, tensors, write);
}

}  // namespace titan::train
