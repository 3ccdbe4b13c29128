// FLUX's parallelize plan, applied to a built model from outside per the job
// config, as TorchTitan's flux/parallelize.py: activation checkpointing of
// every double- and single-stream block, then FSDP over dp_shard x cp (HSDP
// replicas over dp_replicate) with one unit per block and one for the rest
// (the input embedders and the final layer, kept gathered through the step),
// or, without data parallelism, plain mixed precision; context parallelism
// turns every block's joint attention into ring attention over cp, each rank
// holding a slice of the text and of the image tokens.
#pragma once

#include "titan/comm/device_mesh.h"
#include "titan/models/flux/flux_model.h"
#include "titan/models/parallelize_decoder.h"
#include "titan/parallel/parallelized_model.h"

namespace titan::models::flux {

// Tensor, pipeline and expert parallelism, and the per-op selective policy, are refused by name.
parallel::ParallelizedModel parallelize_flux(FluxModel& model, const comm::DeviceMesh& mesh,
                                             const ParallelizeOptions& options);

}  // namespace titan::models::flux
