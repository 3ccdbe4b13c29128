// `titan bench float8`: llama3 debugmodel trained in bf16 and with each float8
// recipe (tensorwise, rowwise, MXFP8) side by side: the step time in one
// process and under FSDP, the bytes FSDP all-gathers per step (from the
// profiler trace), and the overhead over bf16 of a PyTorch peer emulating the
// same casts (bench/float8_peer.py), measured in the same run; then the
// GEMMs alone at llama3 8B widths (a Linear, an MoE layer's experts).
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct Float8BenchOptions {
  int steps = 5;  // timed steps per job, after one warm-up step (steps 2..N)
  int64_t seq_len = 512;
  int64_t local_batch = 4;
  int fsdp_ranks = 4;  // 0: skip the FSDP runs
  int64_t fsdp_seq_len = 256;
  int64_t fsdp_local_batch = 4;  // per rank
  int64_t vocab = 2048;          // the bench corpus's tokenizer
  bool peer = true;
  bool training = true;  // false: only the GEMMs alone (--no-training)
  std::string json_path;
};

int run_float8_bench(const Float8BenchOptions& options);

}  // namespace titan::bench
