// `titan bench plan`: the planner's cost model against real `titan train`
// jobs on this machine. For the debug models on 1, 2 and 4 CPU ranks under
// FSDP, TP, PP (three schedules), CP and EP layouts, each layout's predicted
// step time and peak memory (plan::predict_step on a CPU profile measured for
// that rank count) beside what the same job (plan::layout_job_toml of the same
// request and layout) measures, and the predicted ranking of the layouts of a
// rank count beside the measured one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan::bench {

struct PlanBenchOptions {
  int steps = 8;   // timed steps: the median after warm-up
  int warmup = 2;  // steps left out (the first allocates the optimizer state)
  int64_t seq_len = 512;
  // Sequences per step, the same for every layout: tokens per second per
  // device then rank the layouts of a rank count as their step times do.
  int64_t global_batch = 4;
  std::vector<int> ranks = {1, 2, 4};
  bool moe = true;          // also the Qwen3-MoE debug model (FSDP and expert parallelism)
  bool probe_links = true;  // measure the MPI link (else the profile's recorded defaults)
  std::string json_path;
};

int run_plan_bench(const PlanBenchOptions& options);

}  // namespace titan::bench
