// `titan bench pipeline`: every pipeline schedule on the same job (a Llama of
// 16 layers on `ranks` pipeline ranks, `microbatches` micro-batches a step):
// its theoretical bubble (the schedule simulated with unit costs) beside the
// bubble measured from each rank's busy time, tokens/s, and each rank's peak
// memory. The zero-bubble target: ZBVZeroBubble's measured bubble at most half
// of 1F1B's.
#pragma once

#include <string>
#include <vector>

namespace titan::bench {

struct PipelineBenchOptions {
  std::vector<std::string> schedules = {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"};
  int ranks = 4;
  int microbatches = 8;
  // Layers enough that the embedding and the head (which land on the first
  // and last stages) are small next to a stage's share.
  int layers = 16;
  int steps = 6;  // median over the steps after warm-up
  int warmup = 2;
  int64_t seq_len = 256;
  std::string json_path;
};

int run_pipeline_bench(const PipelineBenchOptions& options);

}  // namespace titan::bench
