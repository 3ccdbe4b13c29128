// A finished (or running) job's metrics.jsonl read back as one series per
// metric, for `titan plot` and `titan compare`. A resumed job appends to the
// same file, so a step may be logged twice: the later record replaces the
// earlier one whole. Records without a "step" (the goodput summary) are skipped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace titan::train {

// One metric of a run: its value at each step that logged it. A null in the
// file (how JSON writes a NaN or an infinity) reads as NaN.
using MetricSeries = std::map<int64_t, double>;

struct RunHistory {
  std::string name;                             // the run folder's name
  std::filesystem::path metrics_path;           // the metrics.jsonl it was read from
  std::vector<int64_t> steps;                   // every logged step, ascending
  std::map<std::string, MetricSeries> metrics;  // arrays of numbers become "name/0", "name/1", ...

  // The metric's series, or nullptr when no step logged it.
  const MetricSeries* find(const std::string& metric) const;
};

// The records of a metrics.jsonl given as text: steps and metrics (name and
// metrics_path are left empty). A malformed line is a titan::Error naming
// `source` and the line.
RunHistory parse_run_history(const std::string& text, const std::string& source);

// `run` is a dump folder holding metrics.jsonl, or the path of a metrics.jsonl.
// A missing file or a malformed line is a titan::Error naming the file (and the line).
RunHistory read_run_history(const std::filesystem::path& run);

}  // namespace titan::train
