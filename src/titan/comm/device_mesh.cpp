#include "titan/comm/device_mesh.h"

#include <array>

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

DeviceMesh::DeviceMesh(const ParallelDims& dims, std::shared_ptr<ProcessGroup> world)
    : dims_(dims.resolved(world->size())) {
  // Row-major over [pp, dp_replicate, dp_shard_mod_ep, ep, cp, tp]: with ep = 1
  // the same layout as [pp, dp_replicate, dp_shard, cp, tp].
  const std::array<MeshDim, 6> axes{MeshDim::pp, MeshDim::dp_replicate, MeshDim::dp_shard_mod_ep,
                                    MeshDim::ep, MeshDim::cp,           MeshDim::tp};
  const std::array<int64_t, 6> sizes{dims_.pp, dims_.dp_replicate, dims_.dp_shard / dims_.ep,
                                     dims_.ep, dims_.cp,           dims_.tp};
  // This rank's coordinates.
  std::array<int64_t, 6> coordinate{};
  int64_t remainder = world->rank();
  for (size_t d = sizes.size(); d-- > 0;) {
    coordinate[d] = remainder % sizes[d];
    remainder /= sizes[d];
  }
  // A group varies the dims in `members` and fixes the others: its color is
  // this rank's position among the fixed dims, its key the position among the varying ones.
  const auto make_group = [&](MeshDim dim, const std::vector<size_t>& members) {
    int64_t color = 0, key = 0, count = 1;
    for (size_t d = 0; d < sizes.size(); ++d) {
      const bool varying = std::find(members.begin(), members.end(), d) != members.end();
      if (varying) {
        key = key * sizes[d] + coordinate[d];
        count *= sizes[d];
      } else {
        color = color * sizes[d] + coordinate[d];
      }
    }
    groups_[static_cast<size_t>(dim)] =
        world->split_axis(static_cast<int>(color), static_cast<int>(key), static_cast<int>(count), mesh_dim_name(dim));
  };
  for (size_t d = 0; d < axes.size(); ++d) make_group(axes[d], {d});
  make_group(MeshDim::dp_shard, {2, 3});
  make_group(MeshDim::dp, {1, 2, 3});
  make_group(MeshDim::dp_shard_cp, {2, 3, 4});
  make_group(MeshDim::dp_shard_mod_ep_cp, {2, 4});
  make_group(MeshDim::dp_cp, {1, 2, 3, 4});
  groups_[static_cast<size_t>(MeshDim::world)] = world;
}

}  // namespace titan::comm
