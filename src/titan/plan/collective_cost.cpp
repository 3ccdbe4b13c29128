#include "titan/plan/collective_cost.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"

namespace titan::plan {

const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::all_gather:
      return "all_gather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::send_recv:
      return "send_recv";
    case Collective::broadcast:
      return "broadcast";
  }
  return "unknown";
}

double LinkProfile::message_seconds(double bytes) const {
  const bool cached = cached_bytes_per_second > 0 && bytes <= cached_bytes;
  return latency_seconds + bytes / (cached ? cached_bytes_per_second : bytes_per_second);
}

namespace {

// One algorithm's cost and name.
struct CollectiveChoice {
  double seconds;
  const char* algorithm;
};

CollectiveChoice cheaper(CollectiveChoice a, CollectiveChoice b) { return a.seconds <= b.seconds ? a : b; }

double collective_log2_steps(int64_t members) { return std::ceil(std::log2(static_cast<double>(members))); }

// `steps` messages of `bytes` each, one after another.
double collective_steps(double steps, double bytes, const LinkProfile& link) {
  return steps > 0 ? steps * link.message_seconds(bytes) : 0.0;
}

// `messages` messages of `bytes` each to different peers, all posted at once
// (NCCL's grouped sends, MPI's all-to-all): one latency, and the device's
// link carries them one after another, each at its own size's bandwidth.
double collective_concurrent(double messages, double bytes, const LinkProfile& link) {
  if (messages <= 0) return 0.0;
  return link.latency_seconds + messages * (link.message_seconds(bytes) - link.latency_seconds);
}

// Summing `bytes` of partial results on a device whose host does the work in
// line (the CPU: the same cores that move the data add it, reading two
// operands and writing one). Accelerators fuse the sum into the copy kernel at
// link speed, so it costs nothing extra there.
double collective_reduce_arithmetic(double bytes, const DeviceProfile& device) {
  if (!device.overhead_in_line || device.memory_bytes_per_second <= 0) return 0.0;
  return 3.0 * bytes / (device.memory_bytes_per_second * device.memory_efficiency);
}

// A member's own block copied within its memory (read and written) on the
// same in-line devices: an out-of-place all-gather or all-to-all places the
// member's own block in its output, titan's ring reduce-scatter clones the
// first block it sends. On the CPU such a copy costs as much as a
// shared-memory message of its size; accelerators copy at HBM speed beside
// the link, so it costs nothing there.
double collective_local_copy(Collective collective, double bytes, int64_t members, const DeviceProfile& device) {
  if (!device.overhead_in_line || device.memory_bytes_per_second <= 0) return 0.0;
  if (collective != Collective::all_gather && collective != Collective::all_to_all &&
      collective != Collective::reduce_scatter) {
    return 0.0;
  }
  return 2.0 * bytes / static_cast<double>(members) / (device.memory_bytes_per_second * device.memory_efficiency);
}

// Ring all-gather (or reduce-scatter) over `members` of a buffer of `bytes`:
// members - 1 steps, each passing one member's share, bytes / members.
double collective_ring(int64_t members, double bytes, const LinkProfile& link) {
  return collective_steps(static_cast<double>(members - 1), bytes / static_cast<double>(members), link);
}

double collective_ring_reduce_scatter(int64_t members, double bytes, const LinkProfile& link,
                                      const DeviceProfile& device) {
  return collective_ring(members, bytes, link) +
         collective_reduce_arithmetic(bytes * static_cast<double>(members - 1) / static_cast<double>(members), device);
}

// All-reduce over one link class: the cheaper of the ring (reduce-scatter then
// all-gather: 2 (n - 1) steps of B / n, bandwidth-optimal for large buffers)
// and recursive doubling (ceil(log2 n) exchanges of the whole buffer,
// latency-optimal for small ones; NCCL's tree and MPI's small-message
// all-reduce both fall in this class of log-depth algorithms).
CollectiveChoice collective_flat_all_reduce(int64_t members, double bytes, const LinkProfile& link,
                                            const DeviceProfile& device) {
  const CollectiveChoice ring = {
      collective_ring_reduce_scatter(members, bytes, link, device) + collective_ring(members, bytes, link), "ring"};
  const double rounds = collective_log2_steps(members);
  const CollectiveChoice doubling = {
      collective_steps(rounds, bytes, link) + collective_reduce_arithmetic(rounds * bytes, device), "tree"};
  return cheaper(ring, doubling);
}

// Broadcast over one link class: a binomial tree (ceil(log2 n) rounds of the
// whole buffer) for small buffers, scatter then ring all-gather (van de
// Geijn: about 2 B (n-1)/n on the wire) for large ones.
CollectiveChoice collective_flat_broadcast(int64_t members, double bytes, const LinkProfile& link) {
  const CollectiveChoice tree = {collective_steps(collective_log2_steps(members), bytes, link), "tree"};
  const CollectiveChoice scatter_gather = {
      collective_steps(collective_log2_steps(members), bytes / static_cast<double>(members), link) +
          collective_ring(members, bytes, link),
      "ring"};
  return cheaper(tree, scatter_gather);
}

// Within one node: every message over the intra-node link.
CollectiveCost collective_within_node(Collective collective, double bytes, int64_t members,
                                      const DeviceProfile& device) {
  const LinkProfile& link = device.intra_node;
  const double n = static_cast<double>(members);
  switch (collective) {
    case Collective::all_gather:
      return {collective_ring(members, bytes, link), "ring", false};
    case Collective::reduce_scatter:
      return {collective_ring_reduce_scatter(members, bytes, link, device), "ring", false};
    case Collective::all_reduce: {
      const CollectiveChoice choice = collective_flat_all_reduce(members, bytes, link, device);
      return {choice.seconds, choice.algorithm, false};
    }
    case Collective::all_to_all:
      // Each member sends B / n to each of the n - 1 others, all at once.
      return {collective_concurrent(n - 1, bytes / n, link), "direct", false};
    case Collective::send_recv:
      return {collective_steps(1, bytes, link), "direct", false};
    case Collective::broadcast: {
      const CollectiveChoice choice = collective_flat_broadcast(members, bytes, link);
      return {choice.seconds, choice.algorithm, false};
    }
  }
  fail("collective_cost: unknown collective");
}

// Across nodes, hierarchically (what NCCL's multi-channel rings amount to when
// every device has its own NIC): with m = members per node and N nodes, the
// intra-node phase runs over the fast link among the m, and the inter-node
// phase runs N - 1 steps among the devices of the same local rank on different
// nodes, all m of them at once, each on its own NIC, carrying 1 / m of the
// node's traffic. So the slow link carries B (N - 1) / (N m) per device, as
// much as a flat ring's cross-node hops would.
//   all-gather (output B):  inter ring of N over B / m, then intra ring of m over B.
//   reduce-scatter (input B): intra ring of m over B, then inter ring of N over B / m.
//   all-reduce: intra reduce-scatter, inter all-reduce of B / m, intra all-gather.
//   all-to-all (send B): the (m - 1) / n share stays in the node, (n - m) / n
//     leaves it; the two run at once on different links: the slower phase counts.
//   send/recv: one message over the inter-node link.
//   broadcast: inter broadcast among the nodes, then intra broadcast.
CollectiveCost collective_across_nodes(Collective collective, double bytes, int64_t members, int64_t nodes,
                                       const DeviceProfile& device) {
  const int64_t per_node = std::max<int64_t>(1, (members + nodes - 1) / nodes);
  const LinkProfile &intra = device.intra_node, &inter = device.inter_node;
  const double m = static_cast<double>(per_node), n = static_cast<double>(members);
  double seconds = 0.0;
  switch (collective) {
    case Collective::all_gather:
      seconds = collective_ring(nodes, bytes / m, inter) + collective_ring(per_node, bytes, intra);
      break;
    case Collective::reduce_scatter:
      seconds = collective_ring_reduce_scatter(per_node, bytes, intra, device) +
                collective_ring_reduce_scatter(nodes, bytes / m, inter, device);
      break;
    case Collective::all_reduce:
      seconds = collective_ring_reduce_scatter(per_node, bytes, intra, device) +
                collective_flat_all_reduce(nodes, bytes / m, inter, device).seconds +
                collective_ring(per_node, bytes, intra);
      break;
    case Collective::all_to_all:
      seconds =
          std::max(collective_concurrent(m - 1, bytes / n, intra), collective_concurrent(n - m, bytes / n, inter));
      break;
    case Collective::send_recv:
      return {collective_steps(1, bytes, inter), "direct", true};
    case Collective::broadcast:
      seconds = collective_flat_broadcast(nodes, bytes, inter).seconds +
                collective_flat_broadcast(per_node, bytes, intra).seconds;
      break;
  }
  return {seconds, "hierarchical", true};
}

}  // namespace

CollectiveCost collective_cost(Collective collective, double bytes, const GroupPlacement& group,
                               const DeviceProfile& device) {
  TITAN_CHECK(group.size >= 1 && group.nodes >= 1 && group.nodes <= group.size,
              "collective_cost: a group of {} members over {} nodes", group.size, group.nodes);
  TITAN_CHECK(bytes >= 0, "collective_cost: {} bytes", bytes);
  if (group.size == 1 && collective != Collective::send_recv) return {0.0, "none", false};
  CollectiveCost cost = group.nodes == 1 ? collective_within_node(collective, bytes, group.size, device)
                                         : collective_across_nodes(collective, bytes, group.size, group.nodes, device);
  // Point-to-point transfers bypass the CPU group's worker; collectives pay its hand-off.
  if (collective != Collective::send_recv) cost.seconds += device.collective_overhead_seconds;
  cost.seconds += collective_local_copy(collective, bytes, group.size, device);
  return cost;
}

}  // namespace titan::plan
