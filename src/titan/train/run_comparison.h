// Two runs' metrics lined up step by step, for `titan compare`: is a change
// (a fast path, a resume, another mesh) bitwise neutral, within a tolerance,
// or where does it first diverge. Only the steps both runs logged are compared.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/train/run_history.h"

namespace titan::train {

// Metrics a deterministic job reproduces exactly: not timing or memory, which
// differ from run to run whatever the maths does.
const std::vector<std::string>& deterministic_metrics();

struct CompareOptions {
  // |a - b| <= atol + rtol * max(|a|, |b|) is within tolerance; 0 and 0 ask for bitwise equality.
  double rtol = 0, atol = 0;
  // Metric names; "name" also selects an array's "name/0", "name/1", ... Empty:
  // deterministic_metrics(), those either run has. A metric named here that
  // neither run has is a titan::Error.
  std::vector<std::string> metrics;
  // false (the default): a step only one run logged makes the runs differ (one
  // stopped early, or logged at other steps). true: compare the common steps alone.
  bool common_steps_only = false;
};

enum class MetricVerdict {
  bitwise_equal,     // the same bits at every step both runs logged it
  within_tolerance,  // different bits, every difference within the tolerance
  diverges,          // a difference past the tolerance, or a value only one run logged at a common step
  not_compared,      // logged only at steps one of the runs lacks
};

struct MetricComparison {
  std::string metric;
  MetricVerdict verdict = MetricVerdict::not_compared;
  int64_t compared_steps = 0;
  double max_abs_diff = 0, max_rel_diff = 0;  // over the compared steps
  // For a divergence: its first step and the two values there (nullopt: that run did not log it).
  int64_t first_divergent_step = -1;
  std::optional<double> a_value, b_value;
};

struct RunComparison {
  std::vector<int64_t> common_steps, only_in_a, only_in_b;
  std::vector<MetricComparison> metrics;
  bool steps_must_match = true;  // CompareOptions::common_steps_only, negated
  // No compared metric diverges, and (unless only common steps count) both runs logged the same steps.
  bool steps_differ() const { return steps_must_match && (!only_in_a.empty() || !only_in_b.empty()); }
  bool match() const;
};

// A titan::Error when the runs share no step or a requested metric is in neither.
RunComparison compare_runs(const RunHistory& a, const RunHistory& b, const CompareOptions& options);

// The report `titan compare` prints: a line per metric, the steps only one run
// has, and a last line saying whether the runs match.
std::string format_comparison(const RunHistory& a, const RunHistory& b, const CompareOptions& options,
                              const RunComparison& comparison);

}  // namespace titan::train
