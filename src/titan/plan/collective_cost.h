// What a collective costs on a group of devices placed over nodes: the
// latency-bandwidth (alpha-beta) model of the ring and tree algorithms, with
// the slowest link class the group spans as its bottleneck.
#pragma once

#include <string>

#include "titan/plan/device_profile.h"

namespace titan::plan {

enum class Collective { all_gather, reduce_scatter, all_reduce, all_to_all, send_recv, broadcast };
const char* collective_name(Collective collective);

// The group a collective runs on: its members and how many nodes they span
// (1: all within one node; members / devices_per_node when spread evenly).
struct GroupPlacement {
  int64_t size = 1;
  int64_t nodes = 1;
};

struct CollectiveCost {
  double seconds = 0.0;
  std::string algorithm;  // "ring", "tree", "hierarchical", "direct"
  bool cross_node = false;
};

// `bytes`: the larger buffer of the call, as the flight recorder and the
// metrics count it (all-gather: the gathered output; reduce-scatter: the
// input; all-reduce, broadcast: the buffer; all-to-all: one member's send
// buffer; send/recv: the message).
CollectiveCost collective_cost(Collective collective, double bytes, const GroupPlacement& group,
                               const DeviceProfile& device);

}  // namespace titan::plan
