#include "titan/train/profile_trace.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "titan/core/error.h"

namespace titan::train {
namespace {

bool is(const profiler::Event& event, const char* category) { return event.category == category; }

}  // namespace

StepProfileSummary summarize_step(const std::vector<profiler::Event>& events, int training_thread, double step_seconds,
                                  size_t top) {
  StepProfileSummary summary;
  summary.step_seconds = step_seconds;
  std::map<std::string, OpTotal> totals;
  // Per thread, the ops still open at each event's start (events come sorted by start, outer first).
  std::map<int, std::vector<std::pair<const profiler::Event*, double>>> open_ops;  // op, its children's time
  const auto close_until = [&](int thread, double time) {
    auto& stack = open_ops[thread];
    while (!stack.empty() && stack.back().first->start_us + stack.back().first->duration_us <= time) {
      const auto [op, children] = stack.back();
      stack.pop_back();
      OpTotal& total = totals[op->name];
      total.self_seconds += (op->duration_us - children) * 1e-6;
      if (!stack.empty()) stack.back().second += op->duration_us;
    }
  };
  for (const profiler::Event& event : events) {
    if (is(event, "comm")) summary.communication_seconds += event.duration_us * 1e-6;
    if (event.thread != training_thread) continue;
    if (is(event, "wait")) summary.exposed_communication_seconds += event.duration_us * 1e-6;
    if (!is(event, "op")) continue;
    close_until(event.thread, event.start_us);
    auto& stack = open_ops[event.thread];
    if (stack.empty()) summary.compute_seconds += event.duration_us * 1e-6;
    OpTotal& total = totals[event.name];
    total.name = event.name;
    ++total.calls;
    ++summary.ops;
    if (event.args.contains("flops")) total.flops += event.args["flops"].get<double>();
    stack.emplace_back(&event, 0.0);
  }
  for (auto& [thread, stack] : open_ops) close_until(thread, std::numeric_limits<double>::infinity());
  summary.host_overhead_seconds =
      std::max(0.0, step_seconds - summary.compute_seconds - summary.exposed_communication_seconds);
  for (auto& [name, total] : totals) summary.top_ops.push_back(total);
  std::sort(summary.top_ops.begin(), summary.top_ops.end(),
            [](const OpTotal& a, const OpTotal& b) { return a.self_seconds > b.self_seconds; });
  if (summary.top_ops.size() > top) summary.top_ops.resize(top);
  return summary;
}

std::string format_summary(const StepProfileSummary& s, int64_t step, int rank) {
  const auto share = [&](double seconds) { return s.step_seconds > 0 ? 100.0 * seconds / s.step_seconds : 0.0; };
  std::string text = fmt::format(
      "titan: profile of step {} (rank {}): {:.3f} s, {} ops: compute {:.1f}%, communication {:.1f}% (exposed "
      "{:.1f}%), host overhead {:.1f}%\n",
      step, rank, s.step_seconds, s.ops, share(s.compute_seconds), share(s.communication_seconds),
      share(s.exposed_communication_seconds), share(s.host_overhead_seconds));
  text += "  top ops by self time:\n";
  for (const OpTotal& op : s.top_ops) {
    text += fmt::format("    {:<28} {:9.4f} s {:5.1f}%  {:6} calls  {:8.2f} GFLOP\n", op.name, op.self_seconds,
                        share(op.self_seconds), op.calls, op.flops * 1e-9);
  }
  return text;
}

void write_chrome_trace(const std::string& path, const std::vector<profiler::Event>& events,
                        const std::vector<std::pair<int, std::string>>& thread_names, int rank, int64_t step) {
  nlohmann::json trace_events = nlohmann::json::array();
  trace_events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
  for (const auto& [thread, name] : thread_names) {
    trace_events.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", thread}, {"args", {{"name", name}}}});
  }
  for (const profiler::Event& event : events) {
    nlohmann::json e{{"name", event.name},       {"cat", event.category}, {"ph", "X"},           {"ts", event.start_us},
                     {"dur", event.duration_us}, {"pid", rank},           {"tid", event.thread}, {"args", event.args}};
    trace_events.push_back(std::move(e));
  }
  const nlohmann::json trace{{"traceEvents", std::move(trace_events)},
                             {"displayTimeUnit", "ms"},
                             {"otherData", {{"rank", rank}, {"step", step}, {"producer", "titan " TITAN_VERSION}}}};
  const std::filesystem::path target(path);
  std::filesystem::create_directories(target.parent_path());
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    TITAN_CHECK(out.good(), "cannot write the profiler trace '{}'", temporary);
    out << trace.dump();
    out.close();
    TITAN_CHECK(out.good(), "cannot write the profiler trace '{}' (disk full?)", temporary);
  }
  std::filesystem::rename(temporary, target);
}

}  // namespace titan::train
