#include "titan/comm/device_mesh.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace titan::comm {

const char* mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::world:
      return "world";
    case MeshDim::pp:
      return "pp";
    case MeshDim::dp_replicate:
      return "dp_replicate";
    case MeshDim::dp_shard:
      return "dp_shard";
    case MeshDim::cp:
      return "cp";
    case MeshDim::tp:
      return "tp";
    case MeshDim::ep:
      return "ep";
    case MeshDim::dp_shard_mod_ep:
      return "dp_shard_mod_ep";
    case MeshDim::dp:
      return "dp";
    case MeshDim::dp_shard_cp:
      return "dp_shard_cp";
    case MeshDim::dp_shard_mod_ep_cp:
      return "dp_shard_mod_ep_cp";
    case MeshDim::dp_cp:
      return "dp_cp";
  }
  return "?";
}

ParallelDims ParallelDims::resolved(int64_t world) const {
  ParallelDims out = *this;
  std::array<int64_t*, 5> degrees{&out.pp, &out.dp_replicate, &out.dp_shard, &out.cp, &out.tp};
  const auto describe = [&] {
    return fmt::format("pp {} x dp_replicate {} x dp_shard {} x cp {} x tp {}", pp, dp_replicate, dp_shard, cp, tp);
  };
  int64_t known = 1;
  int64_t* rest = nullptr;
  for (int64_t* degree : degrees) {
    if (*degree == -1) {
      TITAN_CHECK(rest == nullptr, "parallelism: only one degree may be -1 ({})", describe());
      rest = degree;
    } else {
      TITAN_CHECK(*degree >= 1, "parallelism: degrees must be >= 1 or -1 ({})", describe());
      known *= *degree;
    }
  }
  if (rest != nullptr) {
    TITAN_CHECK(world % known == 0, "parallelism: {} does not divide the world of {} ranks", describe(), world);
    *rest = world / known;
  }
  TITAN_CHECK(out.pp * out.dp_replicate * out.dp_shard * out.cp * out.tp == world,
              "parallelism: {} = {} ranks, but the job has {} (set the degrees so their product is the world size)",
              describe(), out.pp * out.dp_replicate * out.dp_shard * out.cp * out.tp, world);
  TITAN_CHECK(out.ep >= 1 && out.dp_shard % out.ep == 0,
              "parallelism: expert_parallel_degree {} must divide data_parallel_shard_degree {} (expert "
              "parallelism borrows its ranks from the FSDP shards)",
              out.ep, out.dp_shard);
  return out;
}

ParallelDims ParallelDims::resolved_on_nodes(const std::vector<int>& node_of_rank, std::string* note) const {
  if (note != nullptr) note->clear();
  const auto world = static_cast<int64_t>(node_of_rank.size());
  const std::vector<int64_t> per_node = ranks_per_node(node_of_rank);
  const bool even = per_node.size() > 1 &&
                    std::all_of(per_node.begin(), per_node.end(), [&](int64_t n) { return n == per_node.front(); });
  // Only the defaults change; every other case is resolved() as given, whose
  // errors (and the mesh's tensor-parallel check) explain what does not fit.
  if (!even || dp_replicate != 1 || dp_shard != -1 || pp < 1 || cp < 1 || tp < 1 || ep < 1) return resolved(world);
  const int64_t local = per_node.front(), inner = cp * tp;
  if (world % (pp * inner) != 0 || local % inner != 0) return resolved(world);
  // The dp_shard x cp x tp block of consecutive mesh positions must lie in a
  // node: dp_shard divides both the data-parallel degree and what a node holds.
  const int64_t dp = world / (pp * inner);
  const int64_t shard = std::gcd(dp, local / inner);
  // Nothing to shard within a node (tp and cp fill it), or ep does not fit:
  // keep FSDP over the whole job, whose memory per rank replication would multiply.
  if (shard == 1 || shard == dp || shard % ep != 0) return resolved(world);
  ParallelDims hybrid = *this;
  hybrid.dp_shard = shard;
  hybrid.dp_replicate = dp / shard;
  const ParallelDims out = hybrid.resolved(world);
  if (note != nullptr) {
    *note = fmt::format(
        "parallelism: {} nodes of {} ranks: HSDP by default, data_parallel_shard_degree {} within a node x "
        "data_parallel_replicate_degree {} across nodes (set either key to choose otherwise)",
        per_node.size(), local, out.dp_shard, out.dp_replicate);
  }
  return out;
}

std::vector<int64_t> ranks_per_node(const std::vector<int>& node_of_rank) {
  std::vector<int64_t> counts;
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    const int node = node_of_rank[r];
    TITAN_CHECK(node >= 0 && static_cast<size_t>(node) < node_of_rank.size(),
                "device mesh: rank {} on node {}: nodes are numbered 0 to ranks - 1", r, node);
    if (static_cast<size_t>(node) >= counts.size()) counts.resize(static_cast<size_t>(node) + 1, 0);
    ++counts[static_cast<size_t>(node)];
  }
  for (size_t node = 0; node < counts.size(); ++node) {
    TITAN_CHECK(counts[node] > 0, "device mesh: node {} holds no rank (nodes are numbered without gaps)", node);
  }
  return counts;
}

std::vector<int> node_major_order(const std::vector<int>& node_of_rank) {
  ranks_per_node(node_of_rank);  // checks the numbering
  std::vector<int> order(node_of_rank.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return node_of_rank[static_cast<size_t>(a)] < node_of_rank[static_cast<size_t>(b)];
  });
  return order;
}

namespace {

// "2 nodes of 2 ranks each" or "2 nodes holding 3, 1 ranks".
std::string nodes_text(const std::vector<int64_t>& per_node) {
  const bool even = std::all_of(per_node.begin(), per_node.end(), [&](int64_t n) { return n == per_node.front(); });
  if (even) return fmt::format("{} nodes of {} ranks each", per_node.size(), per_node.front());
  return fmt::format("{} nodes holding {} ranks", per_node.size(), fmt::join(per_node, ", "));
}

}  // namespace

DeviceMesh::DeviceMesh(const ParallelDims& dims, std::shared_ptr<ProcessGroup> world, std::vector<int> node_of_rank)
    : dims_(dims.resolved(world->size())) {
  const int ranks = world->size();
  if (node_of_rank.empty()) node_of_rank.assign(static_cast<size_t>(ranks), 0);
  TITAN_CHECK(static_cast<int>(node_of_rank.size()) == ranks,
              "device mesh: {} node entries for a world of {} ranks (one per rank)", node_of_rank.size(), ranks);
  const std::vector<int64_t> per_node = ranks_per_node(node_of_rank);
  nodes_ = static_cast<int>(per_node.size());
  // Mesh position p holds world rank order[p].
  const std::vector<int> order = node_major_order(node_of_rank);
  int position = 0;
  while (order[static_cast<size_t>(position)] != world->rank()) ++position;

  // Row-major over [pp, dp_replicate, dp_shard_mod_ep, ep, cp, tp]: with ep = 1
  // the same layout as [pp, dp_replicate, dp_shard, cp, tp].
  const std::array<MeshDim, 6> axes{MeshDim::pp, MeshDim::dp_replicate, MeshDim::dp_shard_mod_ep,
                                    MeshDim::ep, MeshDim::cp,           MeshDim::tp};
  const std::array<int64_t, 6> sizes{dims_.pp, dims_.dp_replicate, dims_.dp_shard / dims_.ep,
                                     dims_.ep, dims_.cp,           dims_.tp};
  const auto coordinates_of = [&](int64_t p) {
    std::array<int64_t, 6> coordinate{};
    for (size_t d = sizes.size(); d-- > 0;) {
      coordinate[d] = p % sizes[d];
      p /= sizes[d];
    }
    return coordinate;
  };
  const std::array<int64_t, 6> coordinate = coordinates_of(position);
  const auto node_of = [&](int p) { return node_of_rank[static_cast<size_t>(order[static_cast<size_t>(p)])]; };

  // Tensor parallelism runs collectives inside every layer, on the critical
  // path: across nodes it would run at the network's speed, not the node's.
  // Refused on every rank alike (a plain function of the layout), before any split.
  for (int first = 0; first < ranks; first += static_cast<int>(dims_.tp)) {
    for (int p = first + 1; p < first + dims_.tp; ++p) {
      if (node_of(p) == node_of(first)) continue;
      std::vector<int> group;
      for (int q = first; q < first + dims_.tp; ++q) group.push_back(order[static_cast<size_t>(q)]);
      fail(
          "parallelism.tensor_parallel_degree {}: the tensor-parallel group of world ranks {} would span nodes {} "
          "and {} (the job has {}); tensor parallelism must stay within a node: choose a degree that divides the "
          "ranks per node, and use data_parallel_shard_degree / data_parallel_replicate_degree or "
          "pipeline_parallel_degree across nodes",
          dims_.tp, fmt::join(group, ","), node_of(first), node_of(p), nodes_text(per_node));
    }
  }

  // A group varies the dims in `varying` and fixes the others: its color is
  // this rank's position among the fixed dims, its key the position among the
  // varying ones. Its members are the positions that share the fixed
  // coordinates, in increasing position, which is increasing key.
  const auto make_group = [&](MeshDim dim, const std::vector<size_t>& varying) {
    const auto varies = [&](size_t d) { return std::find(varying.begin(), varying.end(), d) != varying.end(); };
    int64_t color = 0, key = 0, count = 1;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (varies(d)) {
        key = key * sizes[d] + coordinate[d];
        count *= sizes[d];
      } else {
        color = color * sizes[d] + coordinate[d];
      }
    }
    std::vector<int>& members = members_[static_cast<size_t>(dim)];
    bool spans = false;
    for (int p = 0; p < ranks; ++p) {
      const std::array<int64_t, 6> other = coordinates_of(p);
      bool same = true;
      for (size_t d = 0; d < sizes.size() && same; ++d) same = varies(d) || other[d] == coordinate[d];
      if (!same) continue;
      spans = spans || node_of(p) != node_of(position);
      members.push_back(order[static_cast<size_t>(p)]);
    }
    std::shared_ptr<ProcessGroup> group =
        world->split_axis(static_cast<int>(color), static_cast<int>(key), static_cast<int>(count), mesh_dim_name(dim));
    group->set_spans_nodes(spans);
    groups_[static_cast<size_t>(dim)] = std::move(group);
  };
  for (size_t d = 0; d < axes.size(); ++d) make_group(axes[d], {d});
  make_group(MeshDim::dp_shard, {2, 3});
  make_group(MeshDim::dp, {1, 2, 3});
  make_group(MeshDim::dp_shard_cp, {2, 3, 4});
  make_group(MeshDim::dp_shard_mod_ep_cp, {2, 4});
  make_group(MeshDim::dp_cp, {1, 2, 3, 4});
  groups_[static_cast<size_t>(MeshDim::world)] = world;
  members_[static_cast<size_t>(MeshDim::world)].resize(static_cast<size_t>(ranks));
  std::iota(members_[static_cast<size_t>(MeshDim::world)].begin(), members_[static_cast<size_t>(MeshDim::world)].end(),
            0);
  world->set_spans_nodes(nodes_ > 1);
}

}  // namespace titan::comm
