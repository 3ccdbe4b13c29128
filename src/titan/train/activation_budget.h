// activation_checkpoint.mode = "memory_budget" (TorchTitan's name): instead
// of naming a plan, the job gives the share of activation memory it may keep,
// 0 (as little as full checkpointing keeps) to 1 (everything). TorchTitan's
// compiler then partitions ops; titan picks among its plans with its memory
// estimate (memory_check.h): no checkpointing, every N-th block, TorchTitan's
// per-op policy, every block. The one whose estimated need is largest within
// full + budget x (none - full) runs: the most activations kept, the least
// recomputed, in the budget.
#pragma once

#include <string>

#include "titan/comm/device_mesh.h"
#include "titan/core/device.h"
#include "titan/models/decoder.h"
#include "titan/train/job_config.h"

namespace titan::train {

// Rewrites config.activation_checkpoint (mode, selective_every, selective_ops)
// to the chosen plan when its mode is memory_budget, and returns a line saying
// what was chosen and why; otherwise leaves it and returns "".
std::string resolve_activation_memory_budget(JobConfig& config, const models::DecoderConfig& model,
                                             const comm::ParallelDims& dims, Device device);

}  // namespace titan::train
