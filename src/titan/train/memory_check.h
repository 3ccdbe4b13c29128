// Before a job allocates anything, the memory it will need per rank (titan's
// meta-device estimate, the data loader's batches) is compared with what the device has, so a job that
// cannot fit ends at once with the numbers and the knobs that would help,
// instead of swapping for minutes until the OOM killer comes.
#pragma once

#include <optional>

#include "titan/comm/device_mesh.h"
#include "titan/core/device.h"
#include "titan/models/decoder.h"
#include "titan/train/job_config.h"

namespace titan::train {

struct MemoryBudget {
  double needed_bytes = 0;     // per rank, at the peak
  double available_bytes = 0;  // per rank: the device's (a GPU's), or this host's available RAM / its ranks
  std::string breakdown;       // what needed_bytes is made of
  std::string source;          // where available_bytes comes from

  // The share of what is available a job may plan to use: the estimate is
  // approximate, and the system and page cache need room too.
  static constexpr double kUsableFraction = 0.9;
  bool fits() const { return available_bytes <= 0 || needed_bytes <= kUsableFraction * available_bytes; }
  // "needs about 1.2 GiB per rank of 22.8 GiB available (5%)"
  std::string summary() const;
};

// Under pipeline parallelism the fullest pipeline rank's need (every rank
// checks the same number, so all start or all refuse), or `pp_rank`'s own.
MemoryBudget job_memory_budget(const JobConfig& config, const models::DecoderConfig& model,
                               const comm::ParallelDims& dims, Device device, std::optional<int> pp_rank = {});

// The budget; a titan::Error when it says the job cannot fit (training.memory_check = false skips the refusal).
MemoryBudget check_job_fits_memory(const JobConfig& config, const models::DecoderConfig& model,
                                   const comm::ParallelDims& dims, Device device);

// `titan generate` on the host, after its weights are loaded: the KV cache of
// `capacity` positions and the prompt's forward against the memory left (the
// weights are counted in the breakdown, already resident). A titan::Error
// naming --max-new-tokens when they cannot fit.
MemoryBudget check_generation_fits_memory(const models::DecoderConfig& model, DType weight_dtype, int64_t prompt_tokens,
                                          int64_t capacity);

}  // namespace titan::train
