// `titan bench failures`: what the checkpoint tiers (docs/checkpoints.md,
// "Multi-tier checkpoints") cost and save. (a) A job of llama3 1B's layer
// shapes (cut to a few blocks so that the training state, its fast-tier
// snapshot, the partner's replica and both /dev/shm copies fit the machine)
// under FSDP 4 on 2 "nodes" (tests/scripts/as_node.sh): the stall each tier
// adds per save and the time to recover from each after every rank is
// killed. (b) The goodput of a tiny model's job of `steps` steps with every
// rank killed (SIGKILL) every `failure_every` steps and restarted at once,
// with the persistent checkpoint alone and with the fast tiers too.
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct FailuresBenchOptions {
  int64_t layers = 2;  // llama3 1B blocks in part (a)
  int64_t steps = 500;
  int64_t failure_every = 100;
  std::string folder = "/tmp/titan_failures_bench";
  std::string json_path;
};

int run_failures_bench(const FailuresBenchOptions& options);

}  // namespace titan::bench
