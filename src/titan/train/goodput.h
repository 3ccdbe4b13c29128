// Where a job's wall time went: productive training, start-up, checkpoint
// stalls, waiting for data, validation, work lost to a restart (steps run
// again since the last checkpoint the previous run saved) and steps skipped
// for non-finite values. The trainer adds each interval as it measures it;
// the intervals follow one another, so they add up to the wall time unless
// one is forgotten or counted twice (what the tests check).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace titan::train {

struct Goodput {
  double startup_seconds = 0.0;     // from the trainer's construction to the first step
  double productive_seconds = 0.0;  // steps that advanced training (without their data waits)
  double data_wait_seconds = 0.0;
  double checkpoint_seconds = 0.0;  // saves (and the final export) holding the loop up
  double validation_seconds = 0.0;
  double lost_seconds = 0.0;     // steps the previous run had already done (recomputed after a restart)
  double skipped_seconds = 0.0;  // steps skipped for a non-finite loss or gradient
  double other_seconds = 0.0;    // the loop's own work: metrics, profiler files, the end-of-step agreement
  int64_t lost_steps = 0;
  int64_t skipped_steps = 0;

  double total_seconds() const;
  // Productive over total, in percent.
  double percent() const;
  nlohmann::json to_json() const;
  std::string summary_line() const;
};

// The last step a previous run of this job logged in `metrics_jsonl` (0 when none):
// steps after the checkpoint a restart resumes from, up to it, are work lost.
int64_t last_logged_step(const std::string& metrics_jsonl);

}  // namespace titan::train
