// Before a job allocates anything, the memory it will need per rank (titan's
// meta-device estimate, the full model every rank builds before sharding, the
// data loader's batches) is compared with what the device has, so a job that
// cannot fit ends at once with the numbers and the knobs that would help,
// instead of swapping for minutes until the OOM killer comes.
#pragma once

#include "titan/core/device.h"
#include "titan/distributed/device_mesh.h"
#include "titan/models/decoder.h"
#include "titan/train/job_config.h"

namespace titan::train {

struct MemoryBudget {
  double needed_bytes = 0;     // per rank, at the peak
  double available_bytes = 0;  // per rank: the device's (a GPU's), or this host's available RAM / its ranks
  std::string breakdown;       // what needed_bytes is made of
  std::string source;          // where available_bytes comes from
};

MemoryBudget job_memory_budget(const JobConfig& config, const models::DecoderConfig& model,
                               const distributed::ParallelDims& dims, Device device);

// A titan::Error when the budget says the job cannot fit (training.memory_check = false skips it).
void check_job_fits_memory(const JobConfig& config, const models::DecoderConfig& model,
                           const distributed::ParallelDims& dims, Device device);

}  // namespace titan::train
