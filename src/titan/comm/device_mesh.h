// How the world's ranks are arranged for parallelism. ParallelDims resolves
// the degrees of pp, dp_replicate, dp_shard, cp and tp (one of them may be -1:
// "the rest of the world") and checks their product is the world size; the
// DeviceMesh lays ranks out row-major over [pp, dp_replicate, dp_shard, cp, tp]
// (tp fastest, so tensor-parallel peers are neighbours) and owns one process
// group per named dim and per flattened view (dp, dp_shard_cp, dp_cp).
//
// Nodes: the mesh lays out the ranks in node order (by node, then by world
// rank within it), not in world rank order, so a launcher that deals ranks to
// nodes round-robin (srun --distribution=cyclic, mpirun --map-by node) still
// gets tp and dp_shard groups inside a node. A tensor-parallel group that
// would span nodes is refused. Every group learns whether its members span
// nodes (ProcessGroup::spans_nodes), so its collectives count as cross-node.
//
// Expert parallelism borrows its ranks from dp_shard, as TorchTitan does:
// dp_shard splits into [dp_shard_mod_ep, ep] (ep faster), so the ep ranks
// that exchange tokens hold different experts and the dp_shard_mod_ep ranks
// that hold the same experts shard them with FSDP.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm/process_group.h"

namespace titan::comm {

// The mesh's dims and flattened views, named here once: "dp" is dp_replicate x
// dp_shard, "dp_shard_cp" FSDP's ranks under context parallelism,
// "dp_shard_mod_ep" (dp_shard / ep) and "dp_shard_mod_ep_cp" the ranks that
// shard the same experts, "dp_cp" the ranks that see different tokens.
enum class MeshDim {
  world,
  pp,
  dp_replicate,
  dp_shard,
  cp,
  tp,
  ep,
  dp_shard_mod_ep,
  dp,
  dp_shard_cp,
  dp_shard_mod_ep_cp,
  dp_cp,
};
inline constexpr size_t kNumMeshDims = static_cast<size_t>(MeshDim::dp_cp) + 1;
// "pp", "dp_shard_cp", ...: the group's name in flight recorder dumps and errors.
const char* mesh_dim_name(MeshDim dim);

struct ParallelDims {
  int64_t pp = 1;
  int64_t dp_replicate = 1;
  int64_t dp_shard = -1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t ep = 1;  // expert parallelism: a factor of dp_shard, not extra ranks

  // Fills a -1 degree and checks the product equals `world`; errors name every degree.
  ParallelDims resolved(int64_t world) const;
  // resolved() for a job whose world rank r runs on node node_of_rank[r]
  // (one entry per rank). HSDP by default: when the job spans several nodes
  // with the same number of ranks each and dp_replicate and dp_shard are at
  // their defaults (1 and -1), dp_shard takes what fits in a node after cp
  // and tp, and dp_replicate the rest, across nodes. `note` (if given) then
  // gets one line saying so, else stays empty. Set either degree to keep it.
  ParallelDims resolved_on_nodes(const std::vector<int>& node_of_rank, std::string* note = nullptr) const;
  int64_t dp() const { return dp_replicate * dp_shard; }
  bool fsdp_enabled() const { return dp_shard * cp > 1; }  // context parallel ranks shard too
  bool tp_enabled() const { return tp > 1; }
};

class DeviceMesh {
 public:
  // Collective over `world`: every rank must construct the mesh with the same
  // dims and nodes. `node_of_rank[r]` is world rank r's node (0, 1, ...:
  // World::node_of_rank()); empty: every rank on one node.
  DeviceMesh(const ParallelDims& dims, std::shared_ptr<ProcessGroup> world, std::vector<int> node_of_rank = {});

  const ParallelDims& dims() const { return dims_; }
  const std::shared_ptr<ProcessGroup>& group(MeshDim dim) const { return groups_[static_cast<size_t>(dim)]; }
  // This rank's index along a dim (or flattened view).
  int coordinate(MeshDim dim) const { return group(dim)->rank(); }
  int size(MeshDim dim) const { return group(dim)->size(); }
  // The world ranks of this rank's group along `dim`, in group rank order.
  const std::vector<int>& members(MeshDim dim) const { return members_[static_cast<size_t>(dim)]; }
  int nodes() const { return nodes_; }

 private:
  ParallelDims dims_;
  int nodes_ = 1;
  std::array<std::shared_ptr<ProcessGroup>, kNumMeshDims> groups_;
  std::array<std::vector<int>, kNumMeshDims> members_;
};

// The world's ranks in mesh order: node by node (nodes by number), by world
// rank within a node. `node_of_rank` as DeviceMesh takes it, not empty.
std::vector<int> node_major_order(const std::vector<int>& node_of_rank);
// How many ranks each node holds, by node; checks the nodes are numbered 0, 1, ... without gaps.
std::vector<int64_t> ranks_per_node(const std::vector<int>& node_of_rank);

}  // namespace titan::comm
