// Job set-up's model half: the model a job config describes, built on the
// meta device, given LoRA adapters, cut to this rank's pipeline stages and
// parallelized, in that order; then only this rank's shards get storage and
// are drawn from the seed by name (nn::initialize), so every layout starts
// from the same model. A job that loads whole weights (a Hugging Face folder
// or a titan model export) builds and loads the whole model first instead;
// titan checkpoints are read later, into the shards, in any mesh. Also what
// the rest of the job needs to know of the model.
#pragma once

#include <memory>
#include <optional>

#include "titan/comm/device_mesh.h"
#include "titan/core/generator.h"
#include "titan/models/decoder.h"
#include "titan/models/float8_plan.h"
#include "titan/models/model_parts.h"
#include "titan/parallel/parallelized_model.h"
#include "titan/train/job_config.h"
#include "titan/train/pipeline_runner.h"

namespace titan::train {

struct JobModel {
  std::shared_ptr<models::Decoder> model;  // this rank's part
  std::unique_ptr<parallel::ParallelizedModel> parallelized;
  std::unique_ptr<PipelineRunner> pipeline;  // null without pipeline parallelism
  models::ModelParts pipeline_parts;         // every stage's modules
  int64_t pipeline_micro_batches = 1;        // per micro-batch of a step
  DType compute_dtype = DType::f32;          // training.mixed_precision_param
  int64_t parameters = 0;                    // the whole model's
  int64_t lora_parameters = 0;               // the adapters', whole (before any sharding)
  std::vector<std::string> float8_linears;   // the Linears a quantize.linear.* converter changed (FQNs)
  std::vector<std::string> float8_experts;   // the MoE experts a quantize.grouped_mm.* converter changed
  double flops_per_token = 0.0;              // forward + backward, the whole model's, for MFU
  double memory_needed_bytes = 0.0;          // the memory check's estimate for this rank (its pipeline stages)
};

// The float8 converter model.converters asks for, with its [quantize.linear.*]
// settings (an empty float8 recipe name is "tensorwise"), or none.
std::optional<models::Float8Options> float8_options(const JobConfig& config);
// model.converters' quantize.grouped_mm.* entry, if any, with its settings.
std::optional<models::Float8GroupedOptions> float8_grouped_options(const JobConfig& config);
// The start lines naming what the converters changed, `linears` Linears and
// `experts` MoE experts modules (TorchTitan logs the same counts); "" without a converter.
std::string float8_summary(const JobConfig& config, size_t linears, size_t experts, DType compute_dtype);

// How the model comes to this rank's shards. meta_then_shards (every job):
// shapes only, then storage, initial values and loaded weights for the
// shards alone. whole_then_shards: the whole f32 model on every rank, drawn
// and loaded, then cut; what every job did before, kept for `titan bench
// startup` to compare against.
enum class ModelStart { meta_then_shards, whole_then_shards };

// `vocab_size`: the tokenizer's ids (0 without one); a Hugging Face
// config.json or model.vocab_size may set more rows. The memory check runs
// before anything is allocated; rank 0 prints it. `generator` initialises the
// weights and LoRA's adapters (and draws LoRA's dropout masks later).
JobModel build_job_model(JobConfig& config, const comm::DeviceMesh& mesh, Device device, int64_t vocab_size,
                         Generator& generator, ModelStart start = ModelStart::meta_then_shards);

}  // namespace titan::train
