// A step whose loss or gradient norm is not finite (a bad batch, an overflow,
// weights gone wrong): skipped with no update (training.skip_nonfinite_steps),
// or the end of the job, after a checkpoint of the weights before the step,
// with the step and the first parameter whose gradient is not finite named.
#pragma once

#include <functional>
#include <string>

#include "titan/comm/process_group.h"
#include "titan/nn/module.h"
#include "titan/optim/adamw.h"
#include "titan/train/job_config.h"
#include "titan/train/metrics.h"

namespace titan::train {

// The first parameter (in model order, on the lowest rank that has one) whose
// gradient holds a NaN or Inf, with its rank; "" when none. Collective over `world`.
std::string first_nonfinite_gradient(nn::Module& model, comm::ProcessGroup& world);

struct NonfiniteStep {
  int64_t step;
  const StepMetrics& metrics;
  bool update_applied;  // a recorded step holds its update: it cannot be skipped or withheld
};

// Returns true when the step is skipped (AdamW then forgets it, so its bias
// corrections count only updates); otherwise saves through `save_checkpoint`
// when checkpoints are on and the update was withheld, and throws.
// Collective over `world`.
bool handle_nonfinite_step(const NonfiniteStep& step, const JobConfig& config, nn::Module& model,
                           optim::AdamW& optimizer, comm::ProcessGroup& world,
                           const std::function<void()>& save_checkpoint);

}  // namespace titan::train
