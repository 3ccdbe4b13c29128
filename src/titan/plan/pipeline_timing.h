// The pipeline half of the step simulation: a schedule's actions
// (parallel/pipeline_schedule.h) run rank by rank in the order each rank
// lists them, a receive waiting for the matching send. What an action costs
// is the caller's (callbacks), so the same walk times the cost model's
// stages and the uniform stages of the textbook bubble formulas
// (tests/plan/pipeline_timing_test.cpp).
#pragma once

#include <functional>
#include <utility>

#include "titan/parallel/pipeline_schedule.h"

namespace titan::plan {

struct PipelineCallbacks {
  // A compute action (F, B, I, W) on `rank`: the callback advances that rank's clock.
  std::function<void(int rank, const parallel::pipeline::Action& action)> compute;
  // A send from `rank`: returns when it left and when it arrives.
  std::function<std::pair<double, double>(int rank, const parallel::pipeline::Action& action)> send;
  // A receive on `rank` of a message that left at `sent` and arrives at `arrives`.
  std::function<void(int rank, const parallel::pipeline::Action& action, double sent, double arrives)> receive;
};

// Runs every rank's actions once; throws titan::Error if the schedule cannot
// complete (a receive whose send never comes).
void run_schedule(const parallel::pipeline::Schedule& schedule, const PipelineCallbacks& callbacks);

}  // namespace titan::plan
