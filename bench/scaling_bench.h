// `titan bench scaling`: weak scaling of FSDP training on this machine —
// the same per-rank batch on 1, 2, 4 ranks (mpirun), reporting tokens/s per
// rank and how much of the communication time the step actually waited for.
#pragma once

#include <string>
#include <vector>

namespace titan::bench {

struct ScalingBenchOptions {
  std::vector<int> ranks = {1, 2, 4};
  int steps = 16;  // median over the steps after warm-up
  int warmup = 2;
  int64_t seq_len = 512;
  int64_t local_batch = 2;
  std::string json_path;
};

int run_scaling_bench(const ScalingBenchOptions& options);

}  // namespace titan::bench
