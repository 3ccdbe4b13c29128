#include "titan/train/model_export.h"

#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/tensor_source.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/core/staging_folder.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/parallelize_decoder.h"
#include "titan/train/config_loader.h"
#include "titan/train/job_model_config.h"

namespace titan::train {

namespace fs = std::filesystem;

namespace {

// The files beside the weights, into `staging`: the tokenizer and Hugging
// Face config the job names (copied in, and named relative to the export),
// and the job config.
void write_support_files(const fs::path& staging, const JobConfig& config) {
  JobConfig saved = config;
  auto bring = [&](std::string& path, const std::string& name) {
    if (path.empty() || !fs::is_regular_file(path)) return;
    fs::copy_file(path, staging / name, fs::copy_options::overwrite_existing);
    path = name;
  };
  bring(saved.model.tokenizer_path, fs::path(config.model.tokenizer_path).filename().string());
  bring(saved.model.hf_config, "config.json");
  checkpoint::write_file_durably((staging / "job.toml").string(), config_to_toml(saved));
}

std::map<std::string, std::string> export_metadata(const JobConfig& config) {
  return {{"format", "titan"}, {"model", config.model.name}, {"flavor", config.model.flavor}};
}

// The export's files, into `staging`.
void write_export_files(const fs::path& staging, const JobConfig& config, const checkpoint::TensorSources& tensors) {
  checkpoint::write_safetensors((staging / "model.safetensors").string(), tensors, export_metadata(config));
  write_support_files(staging, config);
}

// The job config as the export records it: the vocabulary the model was built with.
JobConfig with_model_vocab(const JobConfig& config, const models::Decoder& model) {
  JobConfig saved = config;
  saved.model.vocab_size = model.config.vocab_size;
  return saved;
}

// Weights in the export dtype, each cast only as it is written (one cast
// copy at a time, not a second model); buffers (the MoE expert bias, a
// routing threshold whose steps bf16 would round away) as they are.
checkpoint::TensorSources export_sources(models::Decoder& model, DType dtype) {
  checkpoint::TensorSources sources;
  for (auto& [name, parameter] : model.named_parameters()) {
    const Tensor weight = parameter->data;
    sources.push_back({name, dtype, weight.shape(), [weight, dtype] { return weight.to(dtype); }});
  }
  for (auto& [name, buffer] : model.named_persistent_buffers()) {
    Tensor value = *buffer;
    sources.push_back({name, value.dtype(), value.shape(), [value] { return value; }});
  }
  return sources;
}

}  // namespace

void export_model(models::Decoder& model, const JobConfig& config, const std::string& folder, DType dtype) {
  write_model_export(folder, with_model_vocab(config, model), export_sources(model, dtype));
}

namespace {

// model.safetensors at `file`, streamed: every rank takes part in each_full's
// collectives, and the writers put the tensors their models hold into it.
void write_weights_streamed(models::Decoder& model, const JobConfig& config, const fs::path& file, DType dtype,
                            const FullParameters& each_full, const ExportWriters& who) {
  std::map<nn::Parameter*, std::string> names;
  for (auto& [name, parameter] : model.named_parameters()) names[parameter] = name;
  // The whole model's shapes, from a build on the meta device: this rank holds only shards (or stages).
  std::vector<checkpoint::SafetensorsWriter::Spec> specs;
  const auto whole = model.config.build(Device::meta());
  for (auto& [name, parameter] : whole->named_parameters()) specs.push_back({name, dtype, parameter->data.shape()});
  for (auto& [name, buffer] : whole->named_persistent_buffers())
    specs.push_back({name, buffer->dtype(), buffer->shape()});
  const std::map<std::string, std::string> metadata = export_metadata(config);
  std::optional<checkpoint::SafetensorsWriter> writer;
  if (!who.barrier) {
    if (who.writes) writer.emplace(file.string(), specs, metadata);
  } else {
    if (who.creates) checkpoint::SafetensorsWriter::create_file(file.string(), specs, metadata);
    who.barrier();  // the file exists before any writer opens it
    if (who.writes) {
      std::set<std::string> part;
      for (auto& [name, tensor] : model.named_state()) part.insert(name);
      writer.emplace(file.string(), specs, metadata, part);
    }
  }
  each_full([&](nn::Parameter* parameter, const Tensor& full) {
    if (writer) writer->write(names.at(parameter), full.to(dtype));
  });
  if (writer) {
    for (auto& [name, buffer] : model.named_persistent_buffers()) writer->write(name, *buffer);
    writer->finish();
  }
  if (who.barrier) who.barrier();  // every part is written
}

}  // namespace

void export_model_streamed(models::Decoder& model, const JobConfig& job, const std::string& folder, DType dtype,
                           const FullParameters& each_full, const ExportWriters& who) {
  const JobConfig config = with_model_vocab(job, model);
  std::optional<StagingFolder> staging;
  if (who.creates) staging.emplace(folder);
  if (who.barrier) who.barrier();  // the staging folder exists before any writer opens it
  write_weights_streamed(model, config, StagingFolder::path_for(folder) / "model.safetensors", dtype, each_full, who);
  if (!who.creates) return;
  write_support_files(staging->path(), config);
  staging->publish();
}

void write_model_export(const std::string& folder, const JobConfig& config, const checkpoint::TensorSources& tensors,
                        const std::function<void()>& before_publish) {
  StagingFolder staging(folder);
  write_export_files(staging.path(), config, tensors);
  if (before_publish) before_publish();
  staging.publish();
}

models::DecoderConfig exported_model_config(JobConfig& config, const std::string& folder) {
  TITAN_CHECK(config.model.vocab_size > 0, "{}/job.toml: model.vocab_size is not set", folder);
  return resolve_model_config(config, config.model.vocab_size, folder);
}

namespace {

// An export's job config and tokenizer, its files checked; the model not built yet.
ExportedModel read_export_config(const std::string& folder) {
  const fs::path root(folder);
  TITAN_CHECK(fs::is_directory(root), "'{}' is not a folder", folder);
  for (const char* file : {"job.toml", "model.safetensors"}) {
    TITAN_CHECK(fs::is_regular_file(root / file), "{}: missing {} (not a titan model export?)", folder, file);
  }
  ExportedModel exported;
  load_toml_file(exported.config, (root / "job.toml").string());
  const std::string& tokenizer = exported.config.model.tokenizer_path;
  exported.tokenizer = fs::is_regular_file(root / tokenizer) ? (root / tokenizer).string() : tokenizer;
  return exported;
}

}  // namespace

ExportedModel load_exported_model_on_mesh(const std::string& folder, const comm::DeviceMesh& mesh) {
  ExportedModel exported = read_export_config(folder);
  exported.model = exported_model_config(exported.config, folder).build(Device::meta());
  exported.parallelized =
      std::make_shared<parallel::ParallelizedModel>(models::parallelize_decoder_for_generation(*exported.model, mesh));
  exported.model->materialize(Device::cpu());
  load_exported_weights_into(*exported.model, folder);
  return exported;
}

ExportedModel load_exported_model(const std::string& folder) {
  const fs::path root(folder);
  ExportedModel exported = read_export_config(folder);
  exported.model = exported_model_config(exported.config, folder).build();
  checkpoint::SafetensorsReader reader((root / "model.safetensors").string());
  std::map<std::string, Tensor> state;
  for (const auto& entry : reader.header().entries) state[entry.name] = reader.read(entry.name);
  try {
    exported.model->load_state_dict(state);
  } catch (const Error& error) {
    fail("{}/model.safetensors: {}", folder, error.what());
  }
  return exported;
}

bool is_model_export_folder(const std::string& folder) {
  const fs::path root(folder);
  return !folder.empty() && fs::is_regular_file(root / "job.toml") && fs::is_regular_file(root / "model.safetensors") &&
         !fs::exists(root / checkpoint::kMetadataFile);
}

void load_exported_weights_into(models::Decoder& model, const std::string& folder) {
  const std::string file = (fs::path(folder) / "model.safetensors").string();
  const checkpoint::SafetensorsReader reader(file);
  // The whole model's tensors (names, shapes): this rank may hold only some of them, or shards of them.
  std::map<std::string, Shape> whole;
  {
    const auto expected = model.config.build(Device::meta());
    for (auto& [name, parameter] : expected->named_parameters()) whole[name] = parameter->data.shape();
    for (auto& [name, buffer] : expected->named_persistent_buffers()) whole[name] = buffer->shape();
  }
  for (const auto& entry : reader.header().entries) {
    auto target = whole.find(entry.name);
    TITAN_CHECK(target != whole.end(), "{}: tensor '{}' is not in this job's model (a different model?)", file,
                entry.name);
    TITAN_CHECK(entry.shape == target->second, "{}: tensor '{}' has shape {}, this job's model expects {}", file,
                entry.name, shape_str(entry.shape), shape_str(target->second));
  }
  for (const auto& [name, shape] : whole) {
    TITAN_CHECK(reader.contains(name), "{}: missing tensor '{}' of this job's model", file, name);
  }
  auto load = [&](const std::string& name, Tensor& stored, const nn::ShardLayout& layout) {
    const Tensor box = reader.read_box(name, layout.offsets_in_whole(stored.shape()), stored.shape());
    titan::copy_(stored, box.to(stored.dtype()).to(stored.device()));
  };
  for (auto& [name, parameter] : model.named_parameters()) {
    // Not a weight of the base model: a LoRA adapter, which keeps its initial values.
    if (whole.count(name) == 0 && parameter->data.requires_grad()) continue;
    TITAN_CHECK(whole.count(name) != 0, "{}: no tensor holds '{}'", file, name);
    load(name, parameter->data, parameter->layout);
  }
  for (auto& [name, buffer] : model.named_persistent_buffers()) load(name, *buffer, nn::ShardLayout{});
}

}  // namespace titan::train
