// `titan bench lora`: LoRA fine-tuning against full fine-tuning of the same
// model in the same run: tokens/s, peak memory and the bytes of parameters and
// optimizer state each keeps. Rounds interleave the cases so drift hits each alike.
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct LoraBenchOptions {
  int steps = 5;   // timed steps per run
  int warmup = 2;  // steps before timing
  int rounds = 3;  // runs per case; the median of their per-run medians is reported
  int64_t seq_len = 256;
  int64_t local_batch = 4;
  bool quick = false;  // the debug model only, small shapes
  std::string json_path;
};

int run_lora_bench(const LoraBenchOptions& options);

}  // namespace titan::bench
