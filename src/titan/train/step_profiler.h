// The job's profiling settings ([profiling]) applied to the training loop:
// every profile_freq-th step runs under the profiler; after it each rank writes
// <dump>/<save_traces_folder>/iteration_<step>/rank<r>_trace.json and rank 0
// prints the step's summary. With enable_memory_snapshot every allocation is
// recorded from the start; a profiled step's recording is written to
// <dump>/<save_memory_snapshot_folder>/iteration_<step>/rank<r>_memory_snapshot.{json,html}.
// Whether recording or not, an allocation that fails writes rank<r>_oom.{json,html} there.
#pragma once

#include <cstdint>
#include <string>

#include "titan/train/job_config.h"

namespace titan::train {

class StepProfiler {
 public:
  StepProfiler(const JobConfig& config, int rank);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  // Before step `step`'s work (data loading included).
  void begin_step(int64_t step);
  // After it and what follows it in the loop (validation, checkpoint, metrics): the profiled stretch.
  void end_step(int64_t step);
  bool profiles(int64_t step) const;
  // The memory snapshot the last profiled step wrote (its stem; "" before any).
  const std::string& last_memory_snapshot() const { return last_memory_snapshot_; }
  // The trace the last profiled step wrote ("" before any).
  const std::string& last_trace() const { return last_trace_; }

 private:
  bool enabled_;
  bool memory_;
  int64_t freq_;
  std::string traces_folder_;
  std::string memory_folder_;
  std::string last_memory_snapshot_;
  int rank_;
  int training_thread_ = -1;
  bool active_ = false;
  double begin_us_ = 0.0;
  std::string last_trace_;
};

}  // namespace titan::train
