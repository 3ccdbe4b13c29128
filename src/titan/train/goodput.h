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
  double lost_seconds = 0.0;       // steps the previous run had already done (recomputed after a restart)
  double skipped_seconds = 0.0;    // steps skipped for a non-finite loss or gradient
  double other_seconds = 0.0;      // the loop's own work: metrics, profiler files, the end-of-step agreement
  double fast_tier_seconds = 0.0;  // fast-tier checkpoint snapshots holding the loop up (checkpoint.local_interval)
  double replica_seconds = 0.0;    // sending the fast tier to the partner rank on the next node
  int64_t lost_steps = 0;
  int64_t skipped_steps = 0;
  // The restart this run began with: the tier it resumed from ("fast", "replica",
  // "persistent"; empty: started afresh) and the seconds the restore took (part of start-up).
  std::string restart_tier;
  double recover_seconds = 0.0;
  // Fault tolerance (fault_tolerance.enable; counts, not wall-time parts): steps
  // this replica group took from a live peer instead of training them, the
  // seconds those recoveries took (within the steps' time), all-reduces redone
  // after losing a peer group, and the fewest groups any step ran with.
  bool fault_tolerance = false;
  int64_t ft_steps_recovered = 0, ft_retries = 0, ft_min_replicas_live = 0;
  double ft_recover_seconds = 0.0;

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
