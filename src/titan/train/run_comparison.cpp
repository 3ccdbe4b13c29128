#include "titan/train/run_comparison.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <set>

#include "titan/core/error.h"

namespace titan::train {

namespace {

// "1-4, 7, 9-12".
std::string step_ranges(const std::vector<int64_t>& steps) {
  std::vector<std::string> ranges;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    ranges.push_back(j == i ? fmt::format("{}", steps[i]) : fmt::format("{}-{}", steps[i], steps[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(ranges, ", "));
}

std::string value_text(const std::optional<double>& value) {
  return value ? fmt::format("{}", *value) : std::string("not logged");
}

// The series a requested name selects: itself, or an array's elements "name/0", "name/1", ...
std::vector<std::string> series_named(const std::set<std::string>& available, const std::string& name) {
  std::vector<std::string> names;
  if (available.count(name)) names.push_back(name);
  const std::string prefix = name + "/";
  for (auto it = available.lower_bound(prefix); it != available.end() && it->starts_with(prefix); ++it) {
    names.push_back(*it);
  }
  return names;
}

MetricComparison compare_metric(const std::string& metric, const MetricSeries* a, const MetricSeries* b,
                                const std::vector<int64_t>& common_steps, const CompareOptions& options) {
  MetricComparison result;
  result.metric = metric;
  bool all_bitwise = true;
  for (int64_t step : common_steps) {
    std::optional<double> a_value, b_value;
    if (a != nullptr) {
      if (auto it = a->find(step); it != a->end()) a_value = it->second;
    }
    if (b != nullptr) {
      if (auto it = b->find(step); it != b->end()) b_value = it->second;
    }
    if (!a_value && !b_value) continue;
    ++result.compared_steps;
    bool within = false;
    if (a_value && b_value) {
      const double x = *a_value, y = *b_value;
      // JSON writes every NaN as null: two NaNs are the same value as far as the files can tell.
      const bool bitwise = std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y) || (std::isnan(x) && std::isnan(y));
      all_bitwise = all_bitwise && bitwise;
      if (bitwise) {
        within = true;
      } else if (std::isfinite(x) && std::isfinite(y)) {
        const double abs_diff = std::abs(x - y), scale = std::max(std::abs(x), std::abs(y));
        const double rel_diff = scale > 0 ? abs_diff / scale : 0.0;
        result.max_abs_diff = std::max(result.max_abs_diff, abs_diff);
        result.max_rel_diff = std::max(result.max_rel_diff, rel_diff);
        within = abs_diff <= options.atol + options.rtol * scale;
      }
    }
    if (!within && result.first_divergent_step < 0) {
      result.first_divergent_step = step;
      result.a_value = a_value;
      result.b_value = b_value;
    }
  }
  if (result.compared_steps == 0) {
    result.verdict = MetricVerdict::not_compared;
  } else if (result.first_divergent_step >= 0) {
    result.verdict = MetricVerdict::diverges;
  } else {
    result.verdict = all_bitwise ? MetricVerdict::bitwise_equal : MetricVerdict::within_tolerance;
  }
  return result;
}

}  // namespace

const std::vector<std::string>& deterministic_metrics() {
  static const std::vector<std::string> metrics{"loss",
                                                "grad_norm",
                                                "lr",
                                                "validation_loss",
                                                "aux_loss",
                                                "tokens",
                                                "expert_load_max_over_mean",
                                                "expert_load_worst",
                                                "expert_load_worst_layer"};
  return metrics;
}

bool RunComparison::match() const {
  return !steps_differ() && std::none_of(metrics.begin(), metrics.end(), [](const MetricComparison& metric) {
    return metric.verdict == MetricVerdict::diverges;
  });
}

RunComparison compare_runs(const RunHistory& a, const RunHistory& b, const CompareOptions& options) {
  RunComparison comparison;
  comparison.steps_must_match = !options.common_steps_only;
  std::set_intersection(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(),
                        std::back_inserter(comparison.common_steps));
  std::set_difference(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(),
                      std::back_inserter(comparison.only_in_a));
  std::set_difference(b.steps.begin(), b.steps.end(), a.steps.begin(), a.steps.end(),
                      std::back_inserter(comparison.only_in_b));
  TITAN_CHECK(!a.steps.empty(), "{}: no step records", a.metrics_path.string());
  TITAN_CHECK(!b.steps.empty(), "{}: no step records", b.metrics_path.string());
  TITAN_CHECK(!comparison.common_steps.empty(), "{} (steps {}) and {} (steps {}) have no step in common",
              a.metrics_path.string(), step_ranges(a.steps), b.metrics_path.string(), step_ranges(b.steps));

  std::set<std::string> available;
  for (const auto& [name, series] : a.metrics) available.insert(name);
  for (const auto& [name, series] : b.metrics) available.insert(name);
  const bool defaults = options.metrics.empty();
  std::vector<std::string> compared;
  for (const std::string& requested : defaults ? deterministic_metrics() : options.metrics) {
    const std::vector<std::string> names = series_named(available, requested);
    TITAN_CHECK(!names.empty() || defaults, "--metrics: '{}' is in neither {} nor {}; they log: {}", requested,
                a.metrics_path.string(), b.metrics_path.string(), fmt::join(available, ", "));
    for (const std::string& name : names) {
      if (std::find(compared.begin(), compared.end(), name) == compared.end()) compared.push_back(name);
    }
  }
  for (const std::string& name : compared) {
    comparison.metrics.push_back(compare_metric(name, a.find(name), b.find(name), comparison.common_steps, options));
  }
  return comparison;
}

std::string format_comparison(const RunHistory& a, const RunHistory& b, const CompareOptions& options,
                              const RunComparison& comparison) {
  std::string report =
      fmt::format("A: {} ({} steps: {})\nB: {} ({} steps: {})\n", a.metrics_path.string(), a.steps.size(),
                  step_ranges(a.steps), b.metrics_path.string(), b.steps.size(), step_ranges(b.steps));
  report += fmt::format("comparing {} common steps ({}), rtol {}, atol {}\n", comparison.common_steps.size(),
                        step_ranges(comparison.common_steps), options.rtol, options.atol);
  size_t name_width = 8;
  for (const MetricComparison& metric : comparison.metrics) name_width = std::max(name_width, metric.metric.size());
  std::vector<std::string> diverging;
  for (const MetricComparison& metric : comparison.metrics) {
    std::string verdict;
    switch (metric.verdict) {
      case MetricVerdict::bitwise_equal:
        verdict = "bitwise equal";
        break;
      case MetricVerdict::within_tolerance:
        verdict = fmt::format("within tolerance (max abs diff {:.3g}, max rel diff {:.3g})", metric.max_abs_diff,
                              metric.max_rel_diff);
        break;
      case MetricVerdict::diverges:
        verdict = fmt::format("diverges from step {} (A={}, B={})", metric.first_divergent_step,
                              value_text(metric.a_value), value_text(metric.b_value));
        diverging.push_back(metric.metric);
        break;
      case MetricVerdict::not_compared:
        verdict = "not compared (logged only at steps one run lacks)";
        break;
    }
    report += fmt::format("  {:<{}}  {}\n", metric.metric, name_width, verdict);
  }
  if (comparison.metrics.empty()) report += "  (neither run logs any of the compared metrics)\n";
  if (!comparison.only_in_a.empty()) {
    report += fmt::format("steps only in A: {}\n", step_ranges(comparison.only_in_a));
  }
  if (!comparison.only_in_b.empty()) {
    report += fmt::format("steps only in B: {}\n", step_ranges(comparison.only_in_b));
  }
  if (comparison.match()) {
    report += fmt::format("runs match: {} metric(s) over {} common step(s)\n", comparison.metrics.size(),
                          comparison.common_steps.size());
  } else if (diverging.empty()) {
    report += fmt::format(
        "runs differ: they logged different steps ({} only in {}); the {} common step(s) agree (--common-steps "
        "compares those alone)\n",
        comparison.only_in_a.size() + comparison.only_in_b.size(),
        comparison.only_in_a.empty() ? "B" : (comparison.only_in_b.empty() ? "A" : "one run"),
        comparison.common_steps.size());
  } else {
    int64_t first = std::numeric_limits<int64_t>::max();
    for (const MetricComparison& metric : comparison.metrics) {
      if (metric.verdict == MetricVerdict::diverges) first = std::min(first, metric.first_divergent_step);
    }
    report += fmt::format("runs differ from step {}: {} {}\n", first, fmt::join(diverging, ", "),
                          diverging.size() == 1 ? "diverges" : "diverge");
  }
  return report;
}

}  // namespace titan::train
