// The cost model's answer for one layout: the step's time split into its
// causes, its throughput and MFU, and the peak memory of its fullest rank.
#pragma once

#include <string>
#include <vector>

#include "titan/plan/layout.h"

namespace titan::plan {

// One kind of communication over one link class, per step on the slowest rank.
struct CommCost {
  std::string kind;  // fsdp_all_gather, fsdp_reduce_scatter, dp_all_reduce, tp, cp_ring, ep_all_to_all, pp_send_recv
  bool cross_node = false;
  int64_t calls = 0;
  double bytes = 0.0;            // summed over the calls (each call's larger buffer)
  double busy_seconds = 0.0;     // on the link
  double exposed_seconds = 0.0;  // the step waited for it
};

struct StepPrediction {
  Layout layout;
  double step_seconds = 0.0;
  double compute_seconds = 0.0;    // forward + backward (+ recomputation), the slowest pipeline rank's
  double recompute_seconds = 0.0;  // of which activation checkpointing's extra forwards
  double bubble_seconds = 0.0;     // pipeline: the slowest rank idle in the schedule
  double exposed_comm_seconds = 0.0;
  double optimizer_seconds = 0.0;  // AdamW over the rank's shard, and the gradient norm
  double overhead_seconds = 0.0;   // host dispatch not hidden behind the device
  std::vector<CommCost> comm;
  double tokens_per_second_per_device = 0.0;
  double mfu = 0.0;                    // model FLOPs (no recomputation) over the devices' dense peak
  double memory_bytes = 0.0;           // the fullest rank's estimate
  double memory_capacity_bytes = 0.0;  // the device's
  bool fits = true;
  std::string memory_breakdown;  // the fullest rank's: parameters, gradients, optimizer, activations, ...

  double headroom_bytes() const { return memory_capacity_bytes - memory_bytes; }
  // The largest causes first: "compute 71%, FSDP all-gather (cross-node) exposed 12%, bubble 9%".
  std::string reasons() const;
};

}  // namespace titan::plan
