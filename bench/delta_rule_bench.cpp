#include "bench/delta_rule_bench.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/json_report.h"
#include "bench/timing.h"
#include "titan/core/generator.h"
#include "titan/ops/delta_rule.h"
#include "titan/ops/random.h"

namespace titan::bench {
namespace delta_rule_bench {

Tensor uniform(const Shape& shape, DType dtype, uint64_t seed, double low, double high) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Generator generator(seed);
  ops::uniform_(t, low, high, generator);
  return dtype == DType::f32 ? t : t.to(dtype);
}

// Median wall and process-CPU seconds of `repeats` calls after one warm-up. The
// CPU time (all threads together) is what the work costs even when other
// processes share the cores and stretch the wall time.
struct Timing {
  double wall_ms, cpu_ms;
};

double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

Timing time_calls(const std::function<void()>& body, int repeats) {
  body();
  std::vector<double> wall, cpu;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    body();
    cpu.push_back(1e3 * (process_cpu_seconds() - cpu_start));
    wall.push_back(1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return {median(wall), median(cpu)};
}

}  // namespace delta_rule_bench

int run_delta_rule_bench(const DeltaRuleBenchOptions& options) {
  using delta_rule_bench::time_calls;
  using delta_rule_bench::Timing;
  using delta_rule_bench::uniform;
  const int64_t b = options.batch, t = options.tokens, h = options.heads, dk = options.key_dim, dv = options.value_dim;
  std::printf(
      "titan bench delta-rule: %d threads, B=%lld T=%lld H=%lld Dk=%lld Dv=%lld, chunk 64, median of %d runs\n\n",
      omp_get_max_threads(), static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(h),
      static_cast<long long>(dk), static_cast<long long>(dv), options.repeats);
  std::printf("  %-6s %-10s %12s %12s %20s %20s\n", "dtype", "algorithm", "fwd ms", "fwd CPU ms", "fwd+bwd ms",
              "fwd+bwd CPU ms");
  nlohmann::json results = nlohmann::json::array();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor q = uniform({b, t, h, dk}, dtype, 1, -1.0, 1.0), k = uniform({b, t, h, dk}, dtype, 2, -1.0, 1.0);
    const Tensor v = uniform({b, t, h, dv}, dtype, 3, -1.0, 1.0),
                 grad_out = uniform({b, t, h, dv}, dtype, 4, -1.0, 1.0);
    const Tensor g = uniform({b, t, h}, DType::f32, 5, -0.6, -0.02), beta = uniform({b, t, h}, dtype, 6, 0.05, 0.95);
    double forward_cpu_ms[2] = {0, 0}, both_cpu_ms[2] = {0, 0};
    for (ops::DeltaRuleAlgorithm algorithm : {ops::DeltaRuleAlgorithm::recurrent, ops::DeltaRuleAlgorithm::chunked}) {
      ops::DeltaRuleOptions opts;
      opts.algorithm = algorithm;
      const Timing forward =
          time_calls([&] { ops::gated_delta_rule(q, k, v, g, beta, Tensor(), opts); }, options.repeats);
      const Timing both = time_calls(
          [&] {
            ops::gated_delta_rule(q, k, v, g, beta, Tensor(), opts);
            ops::gated_delta_rule_backward(grad_out, Tensor(), q, k, v, g, beta, Tensor(), opts);
          },
          options.repeats);
      const bool chunked = algorithm == ops::DeltaRuleAlgorithm::chunked;
      forward_cpu_ms[chunked ? 1 : 0] = forward.cpu_ms;
      both_cpu_ms[chunked ? 1 : 0] = both.cpu_ms;
      std::printf("  %-6s %-10s %12.1f %12.1f %20.1f %20.1f\n", dtype_name(dtype), chunked ? "chunked" : "recurrent",
                  forward.wall_ms, forward.cpu_ms, both.wall_ms, both.cpu_ms);
      results.push_back({{"dtype", dtype_name(dtype)},
                         {"algorithm", chunked ? "chunked" : "recurrent"},
                         {"forward_ms", forward.wall_ms},
                         {"forward_cpu_ms", forward.cpu_ms},
                         {"forward_backward_ms", both.wall_ms},
                         {"forward_backward_cpu_ms", both.cpu_ms}});
    }
    std::printf("  %-6s chunked / recurrence, CPU time: forward %.2fx faster, forward+backward %.2fx faster\n\n",
                dtype_name(dtype), forward_cpu_ms[0] / forward_cpu_ms[1], both_cpu_ms[0] / both_cpu_ms[1]);
  }
  write_json_report(
      options.json_path,
      {{"suite", "delta-rule"}, {"tokens", t}, {"heads", h}, {"key_dim", dk}, {"value_dim", dv}, {"results", results}});
  return 0;
}

}  // namespace titan::bench
