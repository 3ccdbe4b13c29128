// `titan bench scaling`: weak scaling of FSDP training on this machine —
// the same per-rank batch on 1, 2, 4 ranks (mpirun), reporting tokens/s per
// rank and how much of the communication time the step actually waited for.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace titan::bench {

struct ScalingBenchOptions {
  std::string config = "configs/llama3_debug.toml";  // the job, under share/titan
  bool expert_parallel = false;                      // expert_parallel_degree = ranks (a MoE job)
  std::vector<int> ranks = {1, 2, 4};
  int steps = 16;  // median over the steps after warm-up
  int warmup = 2;
  int64_t seq_len = 512;
  int64_t local_batch = 2;
  std::string json_path;
};

int run_scaling_bench(const ScalingBenchOptions& options);

struct ScalingRow {
  int ranks;
  double tokens_per_second_per_rank, comm_share, exposed_share;
};
// Runs the job on each rank count, printing a table row per count; returns the rows.
std::vector<ScalingRow> measure_scaling(const ScalingBenchOptions& options);
nlohmann::json scaling_json(const std::vector<ScalingRow>& rows);

}  // namespace titan::bench
