// `titan bench checkpoint`: save and load throughput of a full training state
// (llama3 1B's shapes, vocab 32000, cut to a few layers: f32 weights + two
// AdamW moments, about 2 GB) against the disk's raw write+fsync and read speed measured in the
// same run, and the step stall of an async save against a blocking one.
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct CheckpointBenchOptions {
  int64_t layers = 2;  // llama3 1B blocks kept (each ~60M parameters = 0.73 GB of state)
  std::string folder = "/tmp/titan_checkpoint_bench";
  int repeats = 3;  // raw disk, blocking save, load and async save each; medians reported
  std::string json_path;
};

int run_checkpoint_bench(const CheckpointBenchOptions& options);

}  // namespace titan::bench
