#include "titan/plan/step_prediction.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace titan::plan {

namespace {

std::string comm_label(const CommCost& cost) {
  const char* link = cost.cross_node ? "cross-node" : "intra-node";
  if (cost.kind == "fsdp_all_gather") return fmt::format("FSDP all-gather ({})", link);
  if (cost.kind == "fsdp_reduce_scatter") return fmt::format("FSDP reduce-scatter ({})", link);
  if (cost.kind == "dp_all_reduce") return fmt::format("replica all-reduce ({})", link);
  if (cost.kind == "tp") return fmt::format("TP ({})", link);
  if (cost.kind == "cp_ring" || cost.kind == "cp_all_gather") return fmt::format("CP K/V ({})", link);
  if (cost.kind == "cp_reduce_scatter") return fmt::format("CP K/V gradients ({})", link);
  if (cost.kind == "ep_all_to_all") return fmt::format("EP all-to-all ({})", link);
  if (cost.kind == "pp_send_recv") return fmt::format("PP send/recv ({})", link);
  return fmt::format("{} ({})", cost.kind, link);
}

}  // namespace

std::string StepPrediction::reasons() const {
  if (step_seconds <= 0) return "";
  std::vector<std::pair<double, std::string>> parts;
  parts.emplace_back(compute_seconds - recompute_seconds, "compute");
  parts.emplace_back(recompute_seconds, "recompute");
  parts.emplace_back(bubble_seconds, "bubble");
  parts.emplace_back(optimizer_seconds, "optimizer");
  parts.emplace_back(overhead_seconds, "host");
  for (const CommCost& cost : comm) parts.emplace_back(cost.exposed_seconds, comm_label(cost) + " exposed");
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text;
  for (const auto& [seconds, name] : parts) {
    const double percent = 100.0 * seconds / step_seconds;
    if (percent < 1.0) continue;
    text += fmt::format("{}{} {:.0f}%", text.empty() ? "" : ", ", name, percent);
  }
  return text;
}

}  // namespace titan::plan
