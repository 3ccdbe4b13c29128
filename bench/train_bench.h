// `titan bench train`: training throughput of llama3 debugmodel against the
// same model trained by PyTorch (bench/train_peer.py) in the same run.
#pragma once

#include <string>
#include <vector>

namespace titan::bench {

struct TrainBenchOptions {
  int steps = 6;  // timed steps (median reported)
  int warmup = 2;
  int64_t seq_len = 512;
  int64_t batch = 8;
  int64_t vocab = 2048;
  bool peer = true;  // run the PyTorch peer
  std::vector<std::string> dtypes = {"f32", "bf16"};
  // > 0: also measure both with this many cores kept busy by other processes,
  // and report how much of their unloaded speed each keeps.
  int busy_cores = 0;
  std::string json_path;
};

int run_train_bench(const TrainBenchOptions& options);

// The median seconds of titan's training step for `model`'s debugmodel on
// random tokens at the options' shape (shared with `titan bench moe`).
double titan_median_train_step(const std::string& model, const TrainBenchOptions& options, const std::string& dtype);
// Environment that holds a PyTorch peer to the kernel set titan runs ("" when
// titan runs the CPU's best); pass --no-mkldnn to the peer when non-empty.
std::string peer_isa_environment();

}  // namespace titan::bench
