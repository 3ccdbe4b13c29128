#include "titan/plan/simulated_trace.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "titan/train/profile_trace.h"

namespace titan::plan {

std::vector<std::string> write_simulated_traces(const std::string& folder, const std::vector<TimelineEvent>& events,
                                                const Layout& layout) {
  std::map<int, std::vector<profiler::Event>> by_rank;
  for (const TimelineEvent& event : events) {
    profiler::Event out;
    out.name = event.name;
    // The profiler's categories: compute is "module", waiting is "wait", transfers "comm".
    // (and a pipeline bubble, which the profiler has no name for, "idle").
    out.category = event.category == "comm"     ? (event.stream == 0 ? "wait" : "comm")
                   : event.category == "bubble" ? "idle"
                                                : "module";
    out.start_us = event.start_seconds * 1e6;
    out.duration_us = event.seconds * 1e6;
    out.thread = event.stream;
    out.args = {{"predicted", true}, {"kind", event.category}};
    by_rank[event.rank].push_back(std::move(out));
  }
  std::vector<std::string> written;
  for (auto& [pipeline_rank, rank_events] : by_rank) {
    // Pipeline rank r stands for every rank of its stages; named by the first
    // of them, world rank r x (devices / pp) in the pp-outermost mesh.
    const int64_t rank = pipeline_rank * (layout.devices() / layout.pp);
    const std::string path = (std::filesystem::path(folder) / fmt::format("rank{}_trace.json", rank)).string();
    train::write_chrome_trace(path, rank_events, {{0, "compute (predicted)"}, {1, "communication (predicted)"}},
                              static_cast<int>(rank), 0);
    written.push_back(path);
  }
  return written;
}

}  // namespace titan::plan
