#include "titan/train/dcp_convert.h"

#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/core/staging_folder.h"
#include "titan/train/config_loader.h"
#include "titan/train/dcp_training_state.h"
#include "titan/train/job_model_config.h"
#include "titan/train/model_export.h"

namespace titan::train {

namespace fs = std::filesystem;

bool is_dcp_training_state_key(const std::string& key) {
  for (const char* prefix : {"optimizer.", "lr_scheduler.", "dataloader.", "train_state."}) {
    if (key.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

namespace dcp_convert_detail {

// The whole model's tensors by name and shape (what a job's model would hold unsharded).
std::map<std::string, Shape> whole_model_shapes(const models::DecoderConfig& config) {
  std::map<std::string, Shape> whole;
  const auto model = config.build(Device::meta());
  for (auto& [name, parameter] : model->named_parameters()) whole[name] = parameter->data.shape();
  for (auto& [name, buffer] : model->named_persistent_buffers()) whole[name] = buffer->shape();
  return whole;
}

// Checks the folder holds exactly the model's tensors (beside training state), naming what differs.
void check_model_tensors(const checkpoint::DcpFolderReader& reader, const std::map<std::string, Shape>& whole) {
  const std::string metadata = (fs::path(reader.folder()) / checkpoint::kDcpMetadataFile).string();
  for (const auto& [key, item] : reader.metadata().tensors) {
    if (is_dcp_training_state_key(key)) continue;
    const auto target = whole.find(key);
    TITAN_CHECK(target != whole.end(), "{}: tensor '{}' is not in this job's model (a different model?)", metadata,
                key);
    TITAN_CHECK(item.size == target->second, "{}: tensor '{}' has shape {}, this job's model expects {}", metadata, key,
                shape_str(item.size), shape_str(target->second));
    TITAN_CHECK(item.dtype.has_value(), "{}: tensor '{}' is {}, which titan does not read", metadata, key,
                item.dtype_name);
  }
  for (const auto& [name, shape] : whole) {
    TITAN_CHECK(reader.has_tensor(name), "{}: missing tensor '{}' of this job's model", metadata, name);
  }
}

}  // namespace dcp_convert_detail

void convert_titan_to_dcp(const std::string& titan_folder, const std::string& output, const ConvertOptions& options) {
  const fs::path root(titan_folder);
  // A training checkpoint's step folder: its whole training state, as TorchTitan lays it out.
  if (!fs::exists(root / "model.safetensors") && fs::is_regular_file(root / checkpoint::kMetadataFile)) {
    convert_titan_checkpoint_to_dcp(titan_folder, output, options);
    return;
  }
  TITAN_CHECK(fs::is_regular_file(root / "job.toml") && fs::is_regular_file(root / "model.safetensors"),
              "{}: --to dcp reads a titan model export (job.toml + model.safetensors) or a training checkpoint's step "
              "folder (job.toml + metadata.json)",
              titan_folder);
  TITAN_CHECK(options.merge_lora.empty(), "--merge-lora applies to --to titan and --to hf, not --to dcp");
  JobConfig config;
  load_toml_file(config, (root / "job.toml").string());
  const models::DecoderConfig decoder = exported_model_config(config, titan_folder);
  const auto reader = std::make_shared<const checkpoint::SafetensorsReader>((root / "model.safetensors").string());
  const auto whole = dcp_convert_detail::whole_model_shapes(decoder);
  checkpoint::TensorSources sources;
  for (const auto& [name, shape] : whole) {
    TITAN_CHECK(reader->contains(name), "{}: missing tensor '{}'", reader->path(), name);
    const checkpoint::SafetensorsEntry& entry = reader->entry(name);
    TITAN_CHECK(entry.shape == shape, "{}: tensor '{}' has shape {}, but job.toml implies {}", reader->path(), name,
                shape_str(entry.shape), shape_str(shape));
    const DType dtype = options.dtype.value_or(entry.dtype);
    sources.push_back(
        {name, dtype, entry.shape, [reader, stored = name, dtype] { return reader->read(stored).to(dtype); }});
  }
  for (const auto& entry : reader->header().entries) {
    TITAN_CHECK(whole.count(entry.name) != 0, "{}: unexpected tensor '{}' (not part of this {} {})", reader->path(),
                entry.name, config.model.name, config.model.flavor);
  }
  publish_dcp_folder(output, sources, {}, (root / "job.toml").string());
}

void publish_dcp_folder(const std::string& output, const checkpoint::TensorSources& sources,
                        const std::vector<checkpoint::DcpObject>& objects, const std::string& job_toml) {
  StagingFolder staging{fs::path(output)};
  checkpoint::write_dcp_folder(staging.path().string(), sources, objects);
  fs::copy_file(job_toml, staging.path() / "job.toml");
  staging.publish();
}

void convert_dcp_to_titan(const std::string& dcp_folder, const std::string& output, const std::string& job_config,
                          const ConvertOptions& options) {
  const checkpoint::DcpFolderReader folder_reader(dcp_folder);
  const std::string config_file = !job_config.empty() ? job_config : (fs::path(dcp_folder) / "job.toml").string();
  TITAN_CHECK(fs::is_regular_file(config_file),
              "--from dcp {}: a DCP checkpoint does not say which model it holds; pass --job-config FILE (the "
              "titan or TorchTitan TOML that trained it)",
              dcp_folder);
  JobConfig config;
  load_toml_file(config, config_file);
  // A job that sized its vocabulary from the tokenizer: the embedding's rows say it.
  if (config.model.vocab_size <= 0 && folder_reader.has_tensor("tok_embeddings.weight"))
    config.model.vocab_size = folder_reader.tensor("tok_embeddings.weight").size.at(0);
  const models::DecoderConfig decoder =
      resolve_model_config(config, config.model.vocab_size, fs::path(config_file).parent_path().string());
  const auto whole = dcp_convert_detail::whole_model_shapes(decoder);
  dcp_convert_detail::check_model_tensors(folder_reader, whole);
  const auto reader = std::make_shared<const checkpoint::DcpFolderReader>(dcp_folder);
  checkpoint::TensorSources sources;
  for (const auto& [name, shape] : whole) {
    const DType stored = *reader->tensor(name).dtype;
    const DType dtype = options.dtype.value_or(stored);
    sources.push_back(
        {name, dtype, shape, [reader, stored_name = name, dtype] { return reader->read(stored_name).to(dtype); }});
  }
  write_converted_export(dcp_folder, output, config, decoder, sources, options);
}

void load_dcp_weights_into(models::Decoder& model, const std::string& folder) {
  const checkpoint::DcpFolderReader reader(folder);
  const auto whole = dcp_convert_detail::whole_model_shapes(model.config);
  dcp_convert_detail::check_model_tensors(reader, whole);
  auto load = [&](const std::string& name, Tensor& stored, const nn::ShardLayout& layout) {
    const Tensor box = reader.read_box(name, layout.offsets_in_whole(stored.shape()), stored.shape());
    titan::copy_(stored, box.to(stored.dtype()).to(stored.device()));
  };
  for (auto& [name, parameter] : model.named_parameters()) {
    // Not a weight of the base model: a LoRA adapter, which keeps its initial values.
    if (whole.count(name) == 0 && parameter->data.requires_grad()) continue;
    TITAN_CHECK(whole.count(name) != 0, "{}: no tensor holds '{}'", folder, name);
    load(name, parameter->data, parameter->layout);
  }
  for (auto& [name, buffer] : model.named_persistent_buffers()) load(name, *buffer, nn::ShardLayout{});
}

}  // namespace titan::train
