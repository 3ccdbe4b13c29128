// `titan bench families`: training throughput of every Hugging Face family's
// debugmodel (and llama3's, the baseline) at one shape, each against the same
// architecture trained by PyTorch (bench/families_peer.py) in the same run.
#pragma once

#include <string>
#include <vector>

namespace titan::bench {

// llama3 and every family whose flavors are Hugging Face config.json texts,
// from the model registry: the architectures the PyTorch peer builds.
std::vector<std::string> default_family_bench_models();

struct FamiliesBenchOptions {
  std::vector<std::string> models = default_family_bench_models();
  int steps = 6;  // timed steps (median reported)
  int warmup = 2;
  int64_t seq_len = 256;
  int64_t batch = 4;
  bool peer = true;  // run the PyTorch peer
  std::vector<std::string> dtypes = {"f32"};
  std::string json_path;
};

int run_families_bench(const FamiliesBenchOptions& options);

}  // namespace titan::bench
