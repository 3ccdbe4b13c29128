// `titan bench profiler`: what the profiler costs. The same small training job
// runs with this build's profiler compiled in but off, with it recording every
// step, with the memory recorder on, and — when --baseline names a titan built
// with -DTITAN_PROFILER=OFF (`make bench-profiler` builds one) — without the
// profiler at all; rounds interleave the cases so drift hits each alike.
#pragma once

#include <string>

namespace titan::bench {

struct ProfilerBenchOptions {
  std::string baseline;  // a titan without the profiler ("" : that case is skipped, and said so)
  int steps = 40;        // timed steps per run
  int warmup = 3;
  int rounds = 3;  // runs per case; the median of their per-run medians is reported
  int64_t seq_len = 256;
  int64_t local_batch = 4;
  std::string json_path;
};

int run_profiler_bench(const ProfilerBenchOptions& options);

}  // namespace titan::bench
