// A job's pipeline, decided from its config alone (before any model exists,
// so the memory check and `titan estimate-memory` see what training will
// run): the number of stages, each stage's modules (TorchTitan's keys), and
// the schedule, generated or read from CSV and checked to finish.
#pragma once

#include "titan/models/memory_estimate.h"
#include "titan/models/model_spec.h"
#include "titan/train/job_config.h"

namespace titan::train {

// The placement of pipeline rank `rank` of `config.parallelism.pipeline_parallel_degree`.
// Errors name the parallelism.* key at fault.
models::PipelinePlacement plan_pipeline(const JobConfig& config, const models::ModelSpec& spec,
                                        const models::DecoderConfig& model, int rank);

// Micro-batches per pipeline pass: training.local_batch_size / pipeline_parallel_microbatch_size.
int64_t pipeline_microbatches(const JobConfig& config);

}  // namespace titan::train
