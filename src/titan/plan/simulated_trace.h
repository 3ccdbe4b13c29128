// `titan plan --simulate`: the predicted step of a layout written as Chrome
// trace-event files, one per pipeline rank (rank<r>_trace.json, the
// profiler's own format and names), so a prediction and a profiled step of
// the same job open side by side in Perfetto or chrome://tracing.
#pragma once

#include <string>
#include <vector>

#include "titan/plan/cost_model.h"

namespace titan::plan {

// Writes the events into `folder` (created); returns the files written.
std::vector<std::string> write_simulated_traces(const std::string& folder, const std::vector<TimelineEvent>& events,
                                                const Layout& layout);

}  // namespace titan::plan
