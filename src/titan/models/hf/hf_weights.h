// Reading a Hugging Face folder's weights as titan's tensors: into a built
// (possibly sharded) titan model, e.g. for checkpoint.initial_load_path
// pointing at an HF download, or one tensor at a time for `titan convert`.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "titan/checkpoint/tensor_source.h"
#include "titan/models/decoder.h"
#include "titan/models/hf/hf_folder.h"

namespace titan::models {

// An HF folder's weights seen as titan's tensors (titan names, titan layout,
// the file's dtype), each read only when asked for, whole or a box of it,
// touching only its bytes. Building it plans and checks the folder
// (plan_hf_weights). The reader must outlive it.
class HfTitanTensors {
 public:
  HfTitanTensors(const HfFolderReader& reader, const DecoderConfig& config);
  const HfWeightPlan& plan() const { return weights_; }
  const DecoderConfig& config() const { return config_; }
  // Whether the folder holds titan's `name` (buffers such as the expert bias it does not).
  bool holds(const std::string& name) const { return sources_.count(name) != 0; }
  DType dtype(const std::string& name) const;
  Tensor read(const std::string& name) const;
  // The box of `shape` at `offsets` (titan layout), read row by row where HF orders rows differently.
  Tensor read_box(const std::string& name, const Shape& offsets, const Shape& shape) const;

  // Where the rows of one titan tensor are: one HF tensor from `first_row`
  // on (a tensor of its own, or a part of a fused one), or, for a stack of
  // experts, expert e's whole HF tensor at tensors[e].
  struct Rows {
    std::string hf_name;
    int64_t first_row = 0;
  };
  struct Source {
    bool stacked_experts = false;
    std::vector<Rows> tensors;
    // gpt-oss's experts: part `part` of the expert-layout HF tensor plan().tensors[expert_plan] (-1: none).
    int64_t expert_plan = -1;
    size_t part = 0;
  };

 private:
  const Source& source_of(const std::string& name) const;
  const HfFolderReader& reader_;
  DecoderConfig config_;
  HfWeightPlan weights_;
  std::map<std::string, Source> sources_;
};

// The model's tensors as an HF folder holds them, in the model's order, each
// read on demand and cast to `dtype` (nullopt: as stored); buffers the folder
// lacks (the expert bias) are zero, as the model initialises them.
checkpoint::TensorSources hf_titan_sources(const HfTitanTensors& tensors, std::optional<DType> dtype);

// Every titan-named weight of `config`'s model from an HF folder, whole
// (hf_titan_sources read into memory): for tests and small models.
std::map<std::string, Tensor> read_hf_weights(const HfFolderReader& reader, const models::DecoderConfig& config,
                                              std::optional<DType> dtype = std::nullopt);

// Copies the folder's weights into `model` (cast to its parameter dtype).
// The folder's config.json must describe the same weights as model.config
// (the error lists every differing field). A model that parallelism has cut
// into this rank's shards (nn::ShardLayout) reads only those shards' bytes,
// and holds at most one tensor's shard besides them while it loads (read in
// the file's dtype, then cast); a pipeline stage reads only its own layers.
// LoRA adapters keep their values.
void load_hf_weights_into(models::Decoder& model, const std::string& folder);

}  // namespace titan::models
