// The pipeline walk of the cost model against the textbook bubble formulas:
// with uniform stages (forward F, backward B per micro-batch and stage) and
// free transfers, GPipe and 1F1B take (m + p - 1)(F + B) for m micro-batches
// on p ranks, and interleaving v stages per rank shrinks the bubble to
// (p - 1)(F + B) / v (Narayanan et al., 2021). The zero-bubble schedules,
// whose weight halves fill the gaps, take no longer than 1F1B.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "titan/plan/pipeline_timing.h"

namespace titan::plan {
namespace pipeline_timing_test {

using parallel::pipeline::Action;
using parallel::pipeline::ActionType;

// The step's length when every stage holds 1 / stages of a model whose
// micro-batch forward takes `forward` and backward `backward` on one rank.
double makespan(const parallel::pipeline::Schedule& schedule, double forward, double backward) {
  const double per_stage = 1.0 / schedule.stages;
  std::vector<double> clock(static_cast<size_t>(schedule.ranks), 0.0);
  PipelineCallbacks callbacks;
  callbacks.compute = [&](int rank, const Action& action) {
    double seconds = 0.0;
    switch (action.type) {
      case ActionType::forward:
        seconds = forward;
        break;
      case ActionType::full_backward:
        seconds = backward;
        break;
      case ActionType::backward_input:
      case ActionType::backward_weight:
        seconds = backward / 2;
        break;
      default:
        break;
    }
    clock[static_cast<size_t>(rank)] += seconds * per_stage;
  };
  callbacks.send = [&](int rank, const Action&) {
    return std::make_pair(clock[static_cast<size_t>(rank)], clock[static_cast<size_t>(rank)]);
  };
  callbacks.receive = [&](int rank, const Action&, double, double arrives) {
    clock[static_cast<size_t>(rank)] = std::max(clock[static_cast<size_t>(rank)], arrives);
  };
  run_schedule(schedule, callbacks);
  return *std::max_element(clock.begin(), clock.end());
}

TEST(PipelineTiming, GPipeAnd1F1BTakeTheTextbookTime) {
  const int p = 4, m = 8;
  const double forward = 1.0, backward = 2.0;
  // One stage per rank: each stage's share of a micro-batch is (F + B) / p.
  const double expected = (m + p - 1) * (forward + backward) / p;
  for (const char* name : {"GPipe", "1F1B"}) {
    SCOPED_TRACE(name);
    const auto schedule = parallel::pipeline::generate_schedule(name, p, p, m);
    EXPECT_NEAR(makespan(schedule, forward, backward), expected, 1e-9);
  }
}

TEST(PipelineTiming, InterleavingShrinksTheBubbleByTheStagesPerRank) {
  const int p = 4, m = 8, v = 2;
  const double forward = 1.0, backward = 2.0;
  const double ideal = m * (forward + backward) / p;  // every rank busy throughout
  const double bubble_1f1b = (p - 1) * (forward + backward) / p;
  const auto interleaved = parallel::pipeline::generate_schedule("Interleaved1F1B", p, p * v, m);
  // PyTorch's interleaved order reaches the formula's bubble, (p - 1)(F + B) / (p v).
  EXPECT_NEAR(makespan(interleaved, forward, backward) - ideal, bubble_1f1b / v, 1e-9);
}

TEST(PipelineTiming, ZeroBubbleSchedulesTakeNoLongerThan1F1B) {
  const int p = 4, m = 8;
  const double forward = 1.0, backward = 2.0;
  const double one_f_one_b = makespan(parallel::pipeline::generate_schedule("1F1B", p, p, m), forward, backward);
  const double ideal = m * (forward + backward) / p;
  for (const auto& [name, stages] :
       {std::pair<const char*, int>{"InterleavedZeroBubble", 2 * p}, {"ZBVZeroBubble", 2 * p}}) {
    SCOPED_TRACE(name);
    const double seconds = makespan(parallel::pipeline::generate_schedule(name, p, stages, m), forward, backward);
    EXPECT_LE(seconds, one_f_one_b + 1e-9);
    EXPECT_GE(seconds, ideal - 1e-9);
  }
}

}  // namespace pipeline_timing_test
}  // namespace titan::plan
