// What the profiler recorded for one step: written as a Chrome trace-event
// file, and summed into the summary printed after a profiled step (top ops by
// self time; the step split into compute, communication, exposed
// communication and host overhead).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "titan/core/profiler.h"

namespace titan::train {

// One op name's share of the step (self time: minus the ops it called).
struct OpTotal {
  std::string name;
  int64_t calls = 0;
  double self_seconds = 0.0;
  double flops = 0.0;
};

struct StepProfileSummary {
  double step_seconds = 0.0;
  // Ops on the training thread that no other op called (their nested calls are inside them).
  double compute_seconds = 0.0;
  // Collectives running (on the communication threads), and the training thread waiting for them.
  double communication_seconds = 0.0;
  double exposed_communication_seconds = 0.0;
  // The rest of the step on the training thread: dispatch, autograd, the trainer, data.
  double host_overhead_seconds = 0.0;
  int64_t ops = 0;
  std::vector<OpTotal> top_ops;  // by self time, largest first
};

// `training_thread` is the profiler thread index of the thread that ran the step.
StepProfileSummary summarize_step(const std::vector<profiler::Event>& events, int training_thread, double step_seconds,
                                  size_t top = 10);
std::string format_summary(const StepProfileSummary& summary, int64_t step, int rank);

// Writes `events` as Chrome trace-event JSON (written whole to a temporary name, then renamed).
void write_chrome_trace(const std::string& path, const std::vector<profiler::Event>& events,
                        const std::vector<std::pair<int, std::string>>& thread_names, int rank, int64_t step);

}  // namespace titan::train
