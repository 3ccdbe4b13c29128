// Timing helpers for benchmarks: run a body repeatedly, report the median.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace titan::bench {

// The median of some measurements (0 for none).
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Runs `body` `warmup` times untimed, then `repeats` times; returns the median seconds.
inline double median_seconds(const std::function<void()>& body, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace titan::bench
