#include "titan/models/hf/hf_folder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/mxfp4.h"
#include "titan/checkpoint/tensor_source.h"
#include "titan/checkpoint/torch_archive.h"
#include "titan/core/copy.h"
#include "titan/core/staging_folder.h"
#include "titan/models/hf/hf_index.h"

namespace titan::models {

namespace fs = std::filesystem;

namespace {

std::string read_text_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  TITAN_CHECK(file.good(), "cannot open '{}'", path.string());
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

HfFolderReader::HfFolderReader(std::string folder) : folder_(std::move(folder)) {
  const fs::path root(folder_);
  TITAN_CHECK(fs::is_directory(root), "'{}' is not a folder", folder_);
  const fs::path config = root / "config.json";
  TITAN_CHECK(fs::is_regular_file(config), "{}: missing config.json (not a Hugging Face model folder?)", folder_);
  config_ = models::read_hf_config_file(config.string());

  // safetensors first, as transformers prefers them; else torch.save files.
  const bool torch_files =
      !fs::is_regular_file(root / kHfIndexFile) && !fs::is_regular_file(root / kHfSingleFile) &&
      (fs::is_regular_file(root / kHfTorchIndexFile) || fs::is_regular_file(root / kHfTorchSingleFile));
  const fs::path index_path = root / (torch_files ? kHfTorchIndexFile : kHfIndexFile);
  const fs::path single = root / (torch_files ? kHfTorchSingleFile : kHfSingleFile);
  const auto open_shard = [torch_files](const fs::path& path) -> std::unique_ptr<checkpoint::SafetensorsReader> {
    if (!torch_files) return std::make_unique<checkpoint::SafetensorsReader>(path.string());
    const checkpoint::TorchArchive archive(path.string());
    return std::make_unique<checkpoint::SafetensorsReader>(path.string(), archive.as_safetensors_header());
  };
  if (fs::is_regular_file(index_path)) {
    const std::string source = index_path.string();
    const HfIndex index = parse_hf_index(read_text_file(index_path), source, torch_files ? ".bin" : ".safetensors");
    std::map<std::string, size_t> shard_of_file;
    for (const std::string& file : index.files()) {
      TITAN_CHECK(fs::is_regular_file(root / file), "{}: shard '{}' does not exist", source, file);
      shard_of_file[file] = shards_.size();
      shards_.push_back(open_shard(root / file));
    }
    for (const auto& [tensor, file] : index.weight_map) {
      const size_t shard = shard_of_file.at(file);
      TITAN_CHECK(shards_[shard]->contains(tensor), "{}: tensor '{}' is mapped to '{}', which does not hold it", source,
                  tensor, file);
      where_[tensor] = shard;
    }
    // A tensor the index does not list would be silently skipped by HF's loaders: refuse it here.
    for (const auto& shard : shards_) {
      for (const auto& entry : shard->header().entries) {
        TITAN_CHECK(where_.count(entry.name) != 0 && shards_[where_.at(entry.name)].get() == shard.get(),
                    "{}: tensor '{}' is not listed for this shard in {}", shard->path(), entry.name,
                    index_path.filename().string());
      }
    }
    return;
  }
  TITAN_CHECK(fs::is_regular_file(single), "{}: none of {}, {}, {} or {} is there", folder_, kHfSingleFile,
              kHfIndexFile, kHfTorchSingleFile, kHfTorchIndexFile);
  shards_.push_back(open_shard(single));
  for (const auto& entry : shards_.front()->header().entries) where_[entry.name] = 0;
}

std::vector<std::string> HfFolderReader::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, shard] : where_) names.push_back(name);
  return names;
}

const checkpoint::SafetensorsReader& HfFolderReader::shard_of(const std::string& name) const {
  auto found = where_.find(name);
  TITAN_CHECK(found != where_.end(), "{}: no tensor named '{}'", folder_, name);
  return *shards_[found->second];
}

const std::string& HfFolderReader::file_of(const std::string& name) const { return shard_of(name).path(); }
const checkpoint::SafetensorsEntry& HfFolderReader::entry(const std::string& name) const {
  return shard_of(name).entry(name);
}
Tensor HfFolderReader::read(const std::string& name) const { return shard_of(name).read(name); }

namespace {

// The shape of an HF tensor made of `plan`'s parts: their rows stacked.
Shape hf_shape(const models::HfTensorPlan& plan, const std::map<std::string, Shape>& titan_shapes) {
  if (plan.layout != models::HfTensorLayout::rows) {
    const Shape& first = titan_shapes.at(plan.parts.front().titan_name);
    std::vector<Shape> shapes;
    for (const models::HfTensorPart& part : plan.parts) {
      // A depthwise conv's parts are q, k and v channels, of different counts.
      TITAN_CHECK(titan_shapes.at(part.titan_name) == first || plan.layout == models::HfTensorLayout::depthwise_conv,
                  "tensors joined into '{}' differ in shape ({} vs {})", plan.hf_name,
                  shape_str(titan_shapes.at(part.titan_name)), shape_str(first));
      shapes.push_back(titan_shapes.at(part.titan_name));
    }
    return models::hf_joined_shape(plan, shapes);
  }
  Shape shape;
  for (const models::HfTensorPart& part : plan.parts) {
    const Shape piece = models::hf_part_shape(part, titan_shapes.at(part.titan_name));
    TITAN_CHECK(!piece.empty(), "tensor '{}' has no rows to place in '{}'", part.titan_name, plan.hf_name);
    if (shape.empty()) {
      shape = piece;
    } else {
      TITAN_CHECK(Shape(piece.begin() + 1, piece.end()) == Shape(shape.begin() + 1, shape.end()),
                  "tensors stacked into '{}' differ in shape past their rows ({} vs {})", plan.hf_name,
                  shape_str(piece), shape_str(shape));
      shape[0] += piece[0];
    }
  }
  return shape;
}

// An HF tensor from titan's tensors: each part in HF layout, cast to `dtype`, their rows stacked.
Tensor to_hf_tensor(const models::HfTensorPlan& plan, const std::map<std::string, Tensor>& titan,
                    const models::DecoderConfig& config, DType dtype) {
  if (plan.layout != models::HfTensorLayout::rows) {
    std::vector<Tensor> parts;
    for (const models::HfTensorPart& part : plan.parts) parts.push_back(titan.at(part.titan_name));
    return models::to_hf_joined_tensor(plan, parts).to(dtype);
  }
  std::vector<Tensor> pieces;
  for (const models::HfTensorPart& part : plan.parts) {
    const Tensor& tensor = titan.at(part.titan_name);
    const Tensor source = part.expert >= 0 ? tensor.select(0, part.expert) : tensor;
    pieces.push_back(models::to_hf_layout(part.titan_name, source, config).to(dtype));
  }
  if (pieces.size() == 1) return pieces.front();
  Shape shape = pieces.front().shape();
  for (size_t i = 1; i < pieces.size(); ++i) shape[0] += pieces[i].size(0);
  Tensor stacked = Tensor::empty(shape, dtype);
  int64_t row = 0;
  for (const Tensor& piece : pieces) {
    titan::copy_(stacked.narrow(0, row, piece.size(0)), piece.to(Device::cpu()));
    row += piece.size(0);
  }
  return stacked;
}

// Whether a titan buffer may be left out of an HF folder: the aux-loss-free
// expert bias, which Qwen3MoeForCausalLM has no place for, only while it is
// zero (DeepseekV3ForCausalLM holds it: e_score_correction_bias).
bool omitted_from_hf(const checkpoint::TensorSource& source, const models::HfFamily& family) {
  if (!source.name.ends_with("moe.expert_bias") || family.latent_attention) return false;
  for (float value : source.read().to_floats()) {
    TITAN_CHECK(value == 0.0f,
                "'{}' is non-zero (aux-loss-free load balancing has moved it), and Hugging Face's model has no "
                "place for it: exporting would change which experts the model picks",
                source.name);
  }
  return true;
}

}  // namespace

bool hf_mxfp4_tensor(const HfFolderReader& reader, const HfTensorPlan& plan) {
  return plan.layout != HfTensorLayout::rows && !reader.contains(plan.hf_name) &&
         reader.contains(plan.hf_name + "_blocks") && reader.contains(plan.hf_name + "_scales");
}

Tensor read_hf_expert_tensor(const HfFolderReader& reader, const HfTensorPlan& plan, DType mxfp4_dtype) {
  if (!hf_mxfp4_tensor(reader, plan)) return reader.read(plan.hf_name);
  // Decoded [E, out, in], then [E, in, out] as transformers holds the dequantised weight.
  return checkpoint::dequantize_mxfp4(reader.read(plan.hf_name + "_blocks"), reader.read(plan.hf_name + "_scales"),
                                      mxfp4_dtype, plan.hf_name)
      .transpose(1, 2)
      .contiguous();
}

namespace hf_folder_mtp {

// Whether HF tensors `a` and `b` hold the same values (bit for bit when
// stored alike), read a block of rows at a time so that two copies of a large
// embedding table are never whole in memory.
bool same_values(const HfFolderReader& reader, const std::string& a, const std::string& b) {
  const checkpoint::SafetensorsEntry &x = reader.entry(a), &y = reader.entry(b);
  if (x.shape != y.shape) return false;
  if (x.shape.empty()) return reader.read(a).to(DType::f32).item() == reader.read(b).to(DType::f32).item();
  const int64_t rows = x.shape[0], row_numel = shape_numel(x.shape) / std::max<int64_t>(rows, 1);
  const int64_t block = std::max<int64_t>(1, (int64_t{64} << 20) / std::max<int64_t>(row_numel * 4, 1));
  for (int64_t row = 0; row < rows; row += block) {
    Shape offsets(x.shape.size(), 0), box = x.shape;
    offsets[0] = row;
    box[0] = std::min(block, rows - row);
    Tensor p = reader.read_box(a, offsets, box), q = reader.read_box(b, offsets, box);
    if (x.dtype != y.dtype) {
      p = p.to(DType::f32);
      q = q.to(DType::f32);
    }
    if (std::memcmp(p.contiguous().data_ptr(), q.contiguous().data_ptr(), p.nbytes()) != 0) return false;
  }
  return true;
}

// The layer of an HF per-layer tensor name ("<prefix>layers.N.rest"), or -1.
int64_t layer_of(const std::string& name, const std::string& prefix) {
  const std::string start = prefix + "layers.";
  if (!name.starts_with(start)) return -1;
  size_t at = start.size();
  int64_t layer = 0;
  const size_t begin = at;
  while (at < name.size() && name[at] >= '0' && name[at] <= '9' && at - begin < 9)
    layer = layer * 10 + (name[at++] - '0');
  return at > begin && at < name.size() && name[at] == '.' ? layer : -1;
}

}  // namespace hf_folder_mtp

HfWeightPlan plan_hf_weights(const HfFolderReader& reader, const models::DecoderConfig& config) {
  const std::string& architecture = reader.config().architecture;
  const models::HfFamily& family = models::hf_family(reader.config());
  // Names and shapes only: a meta-device model allocates nothing.
  const auto expected = config.build(Device::meta());
  HfWeightPlan weights;
  std::vector<std::pair<std::string, Shape>> titan_tensors;
  for (auto& [name, parameter] : expected->named_parameters()) {
    titan_tensors.emplace_back(name, parameter->data.shape());
    weights.titan_shapes[name] = parameter->data.shape();
  }
  // The expert bias where the family's folders hold it (the score correction bias).
  for (auto& [name, buffer] : expected->named_persistent_buffers()) {
    if (!family.latent_attention || !name.ends_with("moe.expert_bias")) continue;
    titan_tensors.emplace_back(name, buffer->shape());
    weights.titan_shapes[name] = buffer->shape();
  }
  std::set<std::string> used;
  weights.tensors = models::hf_tensor_plan(family, titan_tensors);
  for (const models::HfTensorPlan& plan : weights.tensors) {
    const std::string& hf_name = plan.hf_name;
    const Shape shape = hf_shape(plan, weights.titan_shapes);
    if (models::hf_mxfp4_tensor(reader, plan)) {
      // MXFP4 blocks and scales of the [E, out, in] weights before HF's transpose to [E, in, out].
      const Shape blocks{shape[0], shape[2], shape[1] / 32, 16}, scales{shape[0], shape[2], shape[1] / 32};
      for (const auto& [name, expected] :
           {std::pair{hf_name + "_blocks", blocks}, std::pair{hf_name + "_scales", scales}}) {
        const checkpoint::SafetensorsEntry& entry = reader.entry(name);
        TITAN_CHECK(shape[1] % 32 == 0 && entry.shape == expected && entry.dtype == DType::u8,
                    "{}: MXFP4 tensor '{}' is {} {}, but config.json implies uint8 {}", reader.file_of(name), name,
                    dtype_name(entry.dtype), shape_str(entry.shape), shape_str(expected));
        used.insert(name);
      }
      continue;
    }
    // A folder may leave out an MTP layer's copies of the shared tensors: titan reads the model's own.
    if (plan.copy && !reader.contains(hf_name)) continue;
    TITAN_CHECK(reader.contains(hf_name), "{}: missing tensor '{}' (titan '{}') of this {}", reader.folder(), hf_name,
                plan.parts.front().titan_name, architecture);
    const checkpoint::SafetensorsEntry& entry = reader.entry(hf_name);
    TITAN_CHECK(entry.shape == shape, "{}: tensor '{}' has shape {}, but config.json implies {}",
                reader.file_of(hf_name), hf_name, shape_str(entry.shape), shape_str(shape));
    TITAN_CHECK(entry.dtype == DType::f32 || entry.dtype == DType::bf16 || entry.dtype == DType::f16,
                "{}: tensor '{}' is {}, expected float32, bfloat16 or float16", reader.file_of(hf_name), hf_name,
                dtype_name(entry.dtype));
    used.insert(hf_name);
    if (plan.copy) {
      // titan shares the table and head with the model: a copy that differs could not be loaded faithfully.
      std::string original;
      for (const models::HfTensorPlan& other : weights.tensors) {
        if (!other.copy && other.parts.front().titan_name == plan.parts.front().titan_name) original = other.hf_name;
      }
      TITAN_CHECK(
          original.empty() || !reader.contains(original) || hf_folder_mtp::same_values(reader, hf_name, original),
          "{}: tensor '{}' differs from '{}': titan's multi-token prediction layers share the model's "
          "embedding table and output head, so they must be equal",
          reader.file_of(hf_name), hf_name, original);
    }
  }
  // Multi-token prediction layers the model does not build (model.num_mtp_layers
  // below the file's num_nextn_predict_layers) are left out, as TorchTitan's loader leaves them.
  const int64_t built = config.n_layers() + static_cast<int64_t>(config.mtp_layers.size());
  const int64_t stored =
      config.n_layers() + (reader.config().mla ? reader.config().mla->num_nextn_predict_layers : int64_t{0});
  std::set<int64_t> dropped;
  for (const std::string& name : reader.tensor_names()) {
    if (models::hf_tensor_skipped(family, name)) continue;  // a vision tower: titan trains the text decoder
    if (used.count(name) == 0) {
      const int64_t layer = hf_folder_mtp::layer_of(name, family.weights_prefix);
      if (layer >= built && layer < stored) {
        dropped.insert(layer);
        continue;
      }
    }
    TITAN_CHECK(used.count(name) != 0 || models::hf_tensor_ignored(name, config),
                "{}: unexpected tensor '{}' (not part of a {} with this config.json)", reader.file_of(name), name,
                architecture);
  }
  if (!dropped.empty()) {
    fmt::print(stderr,
               "note: {}: multi-token prediction layer{} {} (num_nextn_predict_layers = {}) not loaded: the model "
               "has {} (model.num_mtp_layers)\n",
               reader.folder(), dropped.size() > 1 ? "s" : "", fmt::join(dropped, ", "), stored - config.n_layers(),
               config.mtp_layers.size());
  }
  return weights;
}

void write_hf_folder(const std::string& folder, const std::string& model_name, const models::DecoderConfig& config,
                     const checkpoint::TensorSources& sources, const HfWriteOptions& options,
                     const std::function<void()>& before_publish) {
  const models::HfConfig hf = models::hf_config_from_decoder(model_name, config, options.dtype);
  // Every HF tensor as rows of titan tensors (most: one whole tensor). The
  // shards are planned from sizes alone; then each titan tensor is read when
  // the first HF tensor made of it is written, and dropped after the last, so
  // only the tensors of one HF tensor (or one stack of experts) are in memory.
  std::vector<std::pair<std::string, Shape>> titan_tensors;
  std::map<std::string, Shape> titan_shapes;
  std::map<std::string, const checkpoint::TensorSource*> source_of;
  for (const checkpoint::TensorSource& source : sources) {
    if (omitted_from_hf(source, models::hf_family(hf))) continue;
    titan_tensors.emplace_back(source.name, source.shape);
    titan_shapes[source.name] = source.shape;
    source_of[source.name] = &source;
  }
  const std::vector<models::HfTensorPlan> planned = models::hf_tensor_plan(models::hf_family(hf), titan_tensors);
  std::map<std::string, size_t> last_use;  // titan tensor -> the last HF tensor made of it
  std::vector<std::vector<size_t>> shards;
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < planned.size(); ++i) {
    for (const models::HfTensorPart& part : planned[i].parts) last_use[part.titan_name] = i;
    const uint64_t bytes =
        static_cast<uint64_t>(shape_numel(hf_shape(planned[i], titan_shapes))) * dtype_size(options.dtype);
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  TITAN_CHECK(!shards.empty(), "no tensors to write to {}", folder);

  StagingFolder staging_folder(folder);
  const fs::path& staging = staging_folder.path();
  {
    checkpoint::write_file_durably((staging / "config.json").string(), models::hf_config_json(hf));
    HfIndex index;
    index.total_size = total_bytes;
    std::map<std::string, Tensor> held;  // titan tensors read and still needed
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string file = shards.size() == 1
                                   ? std::string(kHfSingleFile)
                                   : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      std::vector<checkpoint::SafetensorsWriter::Spec> specs;
      for (size_t i : shards[s]) {
        specs.push_back({planned[i].hf_name, options.dtype, hf_shape(planned[i], titan_shapes)});
        index.weight_map[planned[i].hf_name] = file;
      }
      // transformers refuses safetensors files without format = pt.
      checkpoint::SafetensorsWriter writer((staging / file).string(), specs, {{"format", "pt"}});
      for (size_t i : shards[s]) {
        for (const models::HfTensorPart& part : planned[i].parts) {
          if (held.count(part.titan_name) == 0) held[part.titan_name] = source_of.at(part.titan_name)->read();
        }
        writer.write(planned[i].hf_name, to_hf_tensor(planned[i], held, config, options.dtype));
        for (const models::HfTensorPart& part : planned[i].parts) {
          if (last_use.at(part.titan_name) == i) held.erase(part.titan_name);
        }
      }
      writer.finish();
    }
    if (shards.size() > 1) checkpoint::write_file_durably((staging / kHfIndexFile).string(), hf_index_json(index));
    for (const auto& [name, source] : options.extra_files) fs::copy_file(source, staging / name);
  }
  if (before_publish) before_publish();
  staging_folder.publish();
}

void write_hf_folder(const std::string& folder, const std::string& model_name, const models::DecoderConfig& config,
                     const checkpoint::NamedTensors& tensors, const HfWriteOptions& options) {
  write_hf_folder(folder, model_name, config, checkpoint::sources_of(tensors), options);
}

bool is_hf_model_folder(const std::string& path) {
  // A titan model export of a job that read an HF config.json carries that file too: its job.toml tells them apart.
  return !path.empty() && fs::is_regular_file(fs::path(path) / "config.json") &&
         !fs::exists(fs::path(path) / "metadata.json") && !fs::exists(fs::path(path) / "job.toml");
}

}  // namespace titan::models
