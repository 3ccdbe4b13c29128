// `titan bench context-parallel`: one long sequence (32k tokens by default)
// trained by one process and by `ranks` context-parallel ranks of this
// machine, side by side: step time, each rank's step memory (peak over what
// the step began with: activations, gradients, ring buffers) beside
// estimate-memory's prediction, attention compute per rank (max / min) with
// and without the head-tail load balancer, and the share of the step spent
// waiting for keys and values. Then estimate-memory's per-GPU figure for a
// 1M-token sequence of Llama 3 8B at CP 8, 16 and 32.
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct ContextParallelBenchOptions {
  int ranks = 4;
  int64_t seq_len = 32768;
  // A shallow Llama (dim 256, 4 heads of 64, 2 KV heads): attention over 32k
  // tokens is the bulk of its step, and one step takes seconds, not minutes.
  int layers = 1;
  int steps = 2;  // median over the steps after warm-up
  int warmup = 1;
  std::string json_path;
};

int run_context_parallel_bench(const ContextParallelBenchOptions& options);

}  // namespace titan::bench
