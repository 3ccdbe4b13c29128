// A trained model written so it can be looked at and reused: model weights in
// safetensors (in a chosen dtype), the job config that built it, and a copy of
// its tokenizer. Written to a temporary folder and renamed into place, so a
// reader never sees a half-written export.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/tensor_source.h"
#include "titan/comm/device_mesh.h"
#include "titan/models/decoder.h"
#include "titan/parallel/parallelized_model.h"
#include "titan/train/job_config.h"

namespace titan::train {

void export_model(models::Decoder& model, const JobConfig& config, const std::string& folder, DType dtype);
// The same for a model whose parameters are split over ranks, streamed:
// `each_full` hands every parameter of this rank's `model` whole, one at a
// time (a collective every rank calls; see
// ParallelizedModel::for_each_full_parameter), and the writers put each into
// the file and drop it, so no rank ever holds the whole model.
using FullParameters = std::function<void(const std::function<void(nn::Parameter*, const Tensor&)>&)>;
// Who writes a streamed export. One rank `creates` the export (and publishes
// it); `writes` marks the ranks that put the tensors their model holds into
// model.safetensors: one rank, or under pipeline parallelism one per stage,
// each with its stages' tensors. Several writers need `barrier`, a collective
// over every rank, to order making the file before writing into it.
struct ExportWriters {
  bool creates = false, writes = false;
  std::function<void()> barrier;  // empty: the one writer is the rank that creates
};
void export_model_streamed(models::Decoder& model, const JobConfig& config, const std::string& folder, DType dtype,
                           const FullParameters& each_full, const ExportWriters& who);
// The same from tensors named, typed and read one at a time (e.g. converted
// from Hugging Face). The tokenizer and model.hf_config files the config
// names are copied in; an existing export at `folder` is replaced only once
// the new one is complete; `before_publish` runs just before, and by
// throwing leaves nothing behind.
void write_model_export(const std::string& folder, const JobConfig& config, const checkpoint::TensorSources& tensors,
                        const std::function<void()>& before_publish = {});
// The model an export's job.toml describes (model.hf_config relative to `folder`).
models::DecoderConfig exported_model_config(JobConfig& config, const std::string& folder);

struct ExportedModel {
  JobConfig config;
  std::shared_ptr<models::Decoder> model;
  std::string tokenizer;  // what data::load_tokenizer takes (a file in the export, or a built-in name)
  // Loaded on a mesh: the plan that cut the model (it must live as long as the model).
  std::shared_ptr<parallel::ParallelizedModel> parallelized;
};

// Loads an export (or any folder with job.toml + model.safetensors); errors
// name the folder and the missing or mismatching file or tensor.
ExportedModel load_exported_model(const std::string& folder);
// The same on a mesh, for generation: the model built on the meta device,
// cut by the generation plan (models::parallelize_decoder_for_generation),
// and only this rank's shards read from the file. Every rank calls it.
ExportedModel load_exported_model_on_mesh(const std::string& folder, const comm::DeviceMesh& mesh);

// Whether `folder` is a model export without a training checkpoint in it
// (job.toml + model.safetensors, no metadata.json): what a job's model-only
// last save (checkpoint.last_save_model_only, the default) writes as its
// final step folder.
bool is_model_export_folder(const std::string& folder);
// Copies an export's weights into `model` (cast to its dtypes), e.g. for
// checkpoint.initial_load_path naming the default job's step folder. Every
// tensor must match one of the whole model's by name and shape, and the
// reverse. A model cut into this rank's shards reads only those shards'
// bytes; LoRA adapters keep their values.
void load_exported_weights_into(models::Decoder& model, const std::string& folder);

}  // namespace titan::train
