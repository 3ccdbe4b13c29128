// `titan bench moe`: mixture-of-experts throughput against PyTorch in the
// same run (bench/moe_peer.py): one MoE layer's forward + backward (titan's
// grouped GEMMs, titan's own per-expert loop, PyTorch's loop over experts as
// Hugging Face writes it) at the qwen3_moe debug shape and at a Qwen3-30B-A3B
// layer shape; a training step of the qwen3_moe debugmodel; and expert
// parallelism over 1, 2, 4 ranks.
#pragma once

#include <string>

namespace titan::bench {

struct MoeBenchOptions {
  int repeats = 5;  // timed repetitions (median reported)
  int warmup = 2;
  int64_t large_tokens = 256;  // tokens through the 30B-A3B-shaped layer
  int train_steps = 4;         // timed training steps
  bool peer = true;
  bool scaling = true;  // the expert-parallel runs (mpirun)
  std::string json_path;
};

int run_moe_bench(const MoeBenchOptions& options);

}  // namespace titan::bench
