// libFuzzer entry point: pipeline schedules as CSV (parallelism.pipeline_parallel_schedule_csv).
// Any input is either refused with titan::Error (by the reader or by the
// checker) or is a schedule the checker accepts; an accepted one simulates to
// a finite timeline with every action placed, and writing it back and reading
// it again gives the same actions.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "titan/core/error.h"
#include "titan/parallel/pipeline_schedule_check.h"
#include "titan/parallel/pipeline_schedule_csv.h"

using namespace titan::parallel::pipeline;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Schedule schedule;
  try {
    schedule = parse_schedule_csv(text, "fuzz.csv", 0, 0);
    check_schedule(schedule);
  } catch (const titan::Error&) {
    return 0;
  }
  const Timeline timeline = simulate_schedule(schedule);
  if (!std::isfinite(timeline.makespan) || timeline.bubble_fraction < 0 || timeline.bubble_fraction > 1) std::abort();
  for (size_t r = 0; r < schedule.actions.size(); ++r) {
    if (timeline.start_times[r].size() != schedule.actions[r].size()) std::abort();
  }
  try {
    const Schedule again =
        parse_schedule_csv(schedule_csv(schedule), "written", schedule.stages, schedule.microbatches);
    if (again.actions != schedule.actions || again.stage_rank != schedule.stage_rank) std::abort();
  } catch (const titan::Error&) {
    std::abort();
  }
  return 0;
}
