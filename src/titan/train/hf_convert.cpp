#include "titan/train/hf_convert.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>

#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/checkpoint/chunk_file.h"
#include "titan/checkpoint/nonfinite_weights.h"
#include "titan/checkpoint/tensor_source.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/lora_plan.h"
#include "titan/train/checkpointer.h"
#include "titan/train/config_loader.h"
#include "titan/train/job_model_config.h"
#include "titan/train/model_export.h"

namespace titan::train {

namespace fs = std::filesystem;

// Convert streams: sources read one tensor at a time (from the HF shards,
// the export's file or the checkpoint's chunks), each passed through the
// LoRA merge and the NaN count as it goes by, and written at once. Peak
// memory is about one tensor (one stack of experts), not the model.

namespace {

// What a conversion found on its way: the tensors holding NaN or Inf, named
// once everything is written, before the output takes its name.
using NonFiniteFound = std::vector<checkpoint::NonFiniteTensor>;

// `sources` as convert writes them: options.merge_lora's adapter added into
// its weights, and every tensor counted for NaN and Inf into `found`.
checkpoint::TensorSources as_converted(checkpoint::TensorSources sources, const models::DecoderConfig& decoder,
                                       const ConvertOptions& options, const std::shared_ptr<NonFiniteFound>& found) {
  std::shared_ptr<const models::PeftAdapter> adapter;
  if (!options.merge_lora.empty()) {
    adapter = std::make_shared<const models::PeftAdapter>(models::read_peft_adapter(options.merge_lora, decoder));
    std::set<std::string> names;
    for (const checkpoint::TensorSource& source : sources) names.insert(source.name);
    models::check_peft_adapter_fits(names, *adapter);
  }
  for (checkpoint::TensorSource& source : sources) {
    source.read = [read = std::move(source.read), name = source.name, adapter, found] {
      Tensor tensor = read();
      if (adapter) tensor = models::merged_peft_weight(name, tensor, *adapter);
      for (const auto& nonfinite : checkpoint::find_nonfinite({{name, tensor}})) found->push_back(nonfinite);
      return tensor;
    };
  }
  return sources;
}

// The check that runs before the output is published: refuses (or, allowed,
// warns about) what `found` holds by then.
std::function<void()> nonfinite_check(const std::shared_ptr<NonFiniteFound>& found, const std::string& source,
                                      const ConvertOptions& options) {
  return [found, source, allow = options.allow_nonfinite] {
    checkpoint::report_nonfinite(*found, source, allow, "--allow-nonfinite");
  };
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
  const models::HfTitanTensors weights(reader, decoder);
  write_converted_export(hf_folder, output, config, decoder, models::hf_titan_sources(weights, options.dtype), options);
}

void write_converted_export(const std::string& source, const std::string& output, JobConfig config,
                            const models::DecoderConfig& decoder, checkpoint::TensorSources sources,
                            const ConvertOptions& options) {
  const auto found = std::make_shared<NonFiniteFound>();
  sources = as_converted(std::move(sources), decoder, options, found);
  config.checkpoint.export_dtype = dtype_name(sources.front().dtype);
  write_model_export(output, config, sources, nonfinite_check(found, source, options));
}

namespace {

// A model export's model.safetensors: every tensor the model has, and nothing else.
checkpoint::TensorSources export_sources(const std::shared_ptr<const checkpoint::SafetensorsReader>& reader,
                                         const JobConfig& config, const models::DecoderConfig& decoder) {
  checkpoint::TensorSources sources;
  std::set<std::string> expected;
  const auto model = decoder.build(Device::meta());  // names and shapes only
  for (auto& [name, tensor] : model->named_state()) {
    TITAN_CHECK(reader->contains(name), "{}: missing tensor '{}'", reader->path(), name);
    const checkpoint::SafetensorsEntry& entry = reader->entry(name);
    TITAN_CHECK(entry.shape == tensor.shape(), "{}: tensor '{}' has shape {}, but job.toml implies {}", reader->path(),
                name, shape_str(entry.shape), shape_str(tensor.shape()));
    sources.push_back({name, entry.dtype, entry.shape, [reader, stored = name] { return reader->read(stored); }});
    expected.insert(name);
  }
  for (const auto& entry : reader->header().entries) {
    TITAN_CHECK(expected.count(entry.name) != 0, "{}: unexpected tensor '{}' (not part of this {} {})", reader->path(),
                entry.name, config.model.name, config.model.flavor);
  }
  return sources;
}

// A training checkpoint's chunks, open for reading whole tensors one at a time.
struct OpenCheckpoint {
  checkpoint::CheckpointMetadata metadata;
  std::unique_ptr<checkpoint::ChunkReader> reader;
};

// A training checkpoint's step folder (no model export in it): the model's
// weights, each read whole from every rank's chunks (whatever mesh saved
// them) when it is written.
checkpoint::TensorSources checkpoint_sources(const fs::path& root, JobConfig& config, models::DecoderConfig& decoder) {
  const std::string folder = root.string();
  std::ifstream file(root / checkpoint::kMetadataFile);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto open = std::make_shared<OpenCheckpoint>();
  open->metadata = checkpoint::parse_checkpoint_metadata(text, (root / checkpoint::kMetadataFile).string());
  const auto& tensors = open->metadata.tensors;
  // A job that sized its vocabulary from the tokenizer recorded 0; the embedding's rows say it.
  const auto embedding = tensors.find("model.tok_embeddings.weight");
  if (config.model.vocab_size <= 0 && embedding != tensors.end())
    config.model.vocab_size = embedding->second.shape.at(0);
  decoder = exported_model_config(config, folder);
  const auto model = decoder.build(Device::meta());  // names and shapes only
  checkpoint::TensorSources sources;
  std::set<std::string> names;
  for (auto& [name, tensor] : model->named_state()) {
    const auto found = tensors.find("model." + name);
    TITAN_CHECK(found != tensors.end(), "{}/metadata.json: missing tensor 'model.{}'", folder, name);
    TITAN_CHECK(found->second.shape == tensor.shape(),
                "{}/metadata.json: tensor 'model.{}' has shape {}, but job.toml implies {}", folder, name,
                shape_str(found->second.shape), shape_str(tensor.shape()));
    const DType dtype = found->second.dtype;
    const Shape shape = found->second.shape;
    sources.push_back({name, dtype, shape, [open, stored = "model." + name, dtype, shape] {
                         Tensor whole = Tensor::empty(shape, dtype);
                         open->reader->read_box(stored, whole, shape, Shape(shape.size(), 0));
                         return whole;
                       }});
    names.insert("model." + name);
  }
  // The checkpoint's own checks (complete, its step, no tensor the model lacks), reading nothing yet.
  Checkpointer::load(folder, {}, {"model"}, &names);
  open->reader = std::make_unique<checkpoint::ChunkReader>(folder, open->metadata);
  return sources;
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
      !fs::exists(root / "model.safetensors") && fs::is_regular_file(root / checkpoint::kMetadataFile);
  TITAN_CHECK(training_checkpoint || fs::is_regular_file(root / "model.safetensors"),
              "{}: missing model.safetensors (not a titan model export?) and metadata.json (not a checkpoint step "
              "folder?)",
              titan_folder);
  models::DecoderConfig decoder;
  checkpoint::TensorSources sources;
  if (training_checkpoint) {
    sources = checkpoint_sources(root, config, decoder);
  } else {
    decoder = exported_model_config(config, titan_folder);
    sources = export_sources(
        std::make_shared<const checkpoint::SafetensorsReader>((root / "model.safetensors").string()), config, decoder);
  }
  const auto found = std::make_shared<NonFiniteFound>();
  sources = as_converted(std::move(sources), decoder, options, found);
  models::HfWriteOptions write;
  write.dtype = options.dtype.value_or(sources.front().dtype);
  write.max_shard_bytes = options.max_shard_bytes;
  // HF tokenizers read tokenizer.json; a tiktoken rank file has no HF equivalent to copy.
  const fs::path tokenizer = root / config.model.tokenizer_path;
  if (!config.model.tokenizer_path.empty() && fs::is_regular_file(tokenizer) &&
      tokenizer.filename() == "tokenizer.json") {
    write.extra_files.emplace_back("tokenizer.json", tokenizer.string());
  }
  models::write_hf_folder(output, config.model.name, decoder, sources, write,
                          nonfinite_check(found, titan_folder, options));
}

}  // namespace titan::train
