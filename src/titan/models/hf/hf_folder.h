// A Hugging Face model folder: config.json plus the weights, either in one
// model.safetensors or in shards listed by model.safetensors.index.json (or, in
// older repos, torch.save files: pytorch_model.bin or its indexed shards, read
// through the restricted unpickler of checkpoint/torch_archive.h).
// Reading checks the index against the shards; writing goes to a temporary
// folder renamed into place, so a failure never leaves a half-written folder
// or touches an existing one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/tensor_source.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_tensor_names.h"

namespace titan::models {

class HfFolderReader {
 public:
  // Opens config.json and the weights; errors name the folder and the file.
  explicit HfFolderReader(std::string folder);
  const std::string& folder() const { return folder_; }
  const models::HfConfig& config() const { return config_; }
  // Every tensor name, sorted.
  std::vector<std::string> tensor_names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // The shard file holding `name`, and its header entry (dtype, shape).
  const std::string& file_of(const std::string& name) const;
  const checkpoint::SafetensorsEntry& entry(const std::string& name) const;
  Tensor read(const std::string& name) const;
  // The box of `shape` at `offsets` of a tensor (SafetensorsReader::read_box).
  Tensor read_box(const std::string& name, const Shape& offsets, const Shape& shape) const {
    return shard_of(name).read_box(name, offsets, shape);
  }

 private:
  const checkpoint::SafetensorsReader& shard_of(const std::string& name) const;
  std::string folder_;
  models::HfConfig config_;
  std::vector<std::unique_ptr<checkpoint::SafetensorsReader>> shards_;
  std::map<std::string, size_t> where_;  // tensor -> shard
};

// What an HF folder holds for `config`'s model: its HF tensors (each the rows
// of titan tensors, hf_tensor_plan) and the whole shapes of titan's
// parameters. Planning checks the folder: every tensor the model
// needs is there with its shape and a float dtype, and every tensor there is
// one the model needs (or one HF keeps that titan ignores); errors name file
// and tensor.
struct HfWeightPlan {
  std::vector<HfTensorPlan> tensors;
  std::map<std::string, Shape> titan_shapes;
};
HfWeightPlan plan_hf_weights(const HfFolderReader& reader, const models::DecoderConfig& config);
// Whether the folder holds an expert tensor of `plan` (gpt-oss) as MXFP4
// `<name>_blocks` and `<name>_scales` instead of the tensor itself; and the
// tensor as transformers holds it, whole (MXFP4 decoded into `mxfp4_dtype`).
bool hf_mxfp4_tensor(const HfFolderReader& reader, const HfTensorPlan& plan);
Tensor read_hf_expert_tensor(const HfFolderReader& reader, const HfTensorPlan& plan, DType mxfp4_dtype);

struct HfWriteOptions {
  DType dtype = DType::f32;
  // A new shard starts when the next tensor would take one past this; one
  // shard is written as model.safetensors with no index.
  uint64_t max_shard_bytes = uint64_t{5} << 30;
  // Files copied in as they are: (name in the folder, source path).
  std::vector<std::pair<std::string, std::string>> extra_files;
};

// Writes titan-named tensors (in titan layout) of `model_name`'s model
// described by `config` as an HF folder at `folder`, replacing it if present
// once the new one is complete. From sources, each titan tensor is read once
// and held only while the HF tensors made of it are written. `before_publish`
// runs once every file is written, before the folder takes its name: a check
// over everything written (e.g. for NaN) that, by throwing, leaves nothing behind.
void write_hf_folder(const std::string& folder, const std::string& model_name, const models::DecoderConfig& config,
                     const checkpoint::TensorSources& sources, const HfWriteOptions& options,
                     const std::function<void()>& before_publish = {});
void write_hf_folder(const std::string& folder, const std::string& model_name, const models::DecoderConfig& config,
                     const checkpoint::NamedTensors& tensors, const HfWriteOptions& options);

// Whether `path` is a Hugging Face model folder: a config.json and no titan
// checkpoint metadata beside it.
bool is_hf_model_folder(const std::string& path);

}  // namespace titan::models
