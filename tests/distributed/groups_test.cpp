// Sub-groups: split by color and key, and the DeviceMesh's groups for each
// named dim and flattened view. Membership is checked by all-gathering world
// ranks over each group, against a layout enumerated here independently and,
// for the 4-rank meshes, against tables written out by hand.
#include <gtest/gtest.h>

#include <array>
#include <map>

#include "distributed/mpi_test_support.h"
#include "titan/comm/device_mesh.h"

namespace titan::comm {
namespace groups_test {

using testing::member_world_ranks;
using testing::world;

TEST(Groups, SplitEvenOddOrderedByKey) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  // Key -rank: members are ordered by falling world rank.
  const auto sub = group.split(me % 2, -me, "parity");
  std::vector<int64_t> expected;
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == me % 2) expected.push_back(r);
  }
  EXPECT_EQ(sub->name(), "parity");
  EXPECT_EQ(sub->size(), static_cast<int>(expected.size()));
  EXPECT_EQ(expected[sub->rank()], me);
  EXPECT_EQ(member_world_ranks(*sub), expected);

  // Collectives stay within the sub-group.
  const Tensor total = Tensor::from_vector(std::vector<int64_t>{me}, {1});
  sub->all_reduce(total, ReduceOp::sum)->wait();
  int64_t expected_total = 0;
  for (int64_t r : expected) expected_total += r;
  EXPECT_EQ(total.to_ints()[0], expected_total);

  // One color for all: the whole world, reversed by key.
  const auto reversed = group.split(0, n - 1 - me, "reversed");
  EXPECT_EQ(reversed->rank(), n - 1 - me);
  std::vector<int64_t> descending;
  for (int r = n - 1; r >= 0; --r) descending.push_back(r);
  EXPECT_EQ(member_world_ranks(*reversed), descending);
}

// The reference layout: ranks row-major over [pp, dp_replicate, dp_shard, cp, tp].
struct Layout {
  std::array<int64_t, 5> sizes;

  std::array<int64_t, 5> coordinates(int64_t rank) const {
    std::array<int64_t, 5> out{};
    for (int d = 4; d >= 0; --d) {
      out[d] = rank % sizes[d];
      rank /= sizes[d];
    }
    return out;
  }

  // Ranks that share `rank`'s coordinates on every dim outside `varying`, ascending.
  std::vector<int64_t> peers(int64_t rank, const std::vector<int>& varying) const {
    const auto mine = coordinates(rank);
    std::vector<int64_t> out;
    for (int64_t q = 0; q < sizes[0] * sizes[1] * sizes[2] * sizes[3] * sizes[4]; ++q) {
      const auto theirs = coordinates(q);
      bool same = true;
      for (int d = 0; d < 5; ++d) {
        if (std::find(varying.begin(), varying.end(), d) == varying.end() && theirs[d] != mine[d]) same = false;
      }
      if (same) out.push_back(q);
    }
    return out;
  }
};

// Checks every group of `mesh` against the reference layout; returns the
// members of each group by name, for tests to compare with written tables.
std::map<std::string, std::vector<int64_t>> check_mesh(const DeviceMesh& mesh) {
  const ParallelDims& dims = mesh.dims();
  const Layout layout{{dims.pp, dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp}};
  const std::vector<std::pair<MeshDim, std::vector<int>>> varying{{MeshDim::pp, {0}},
                                                                  {MeshDim::dp_replicate, {1}},
                                                                  {MeshDim::dp_shard, {2}},
                                                                  {MeshDim::cp, {3}},
                                                                  {MeshDim::tp, {4}},
                                                                  {MeshDim::dp, {1, 2}},
                                                                  {MeshDim::dp_shard_cp, {2, 3}},
                                                                  {MeshDim::dp_cp, {1, 2, 3}},
                                                                  {MeshDim::world, {0, 1, 2, 3, 4}}};
  const int me = world().rank();
  std::map<std::string, std::vector<int64_t>> members;
  for (const auto& [dim, dims_varied] : varying) {
    const std::string name = mesh_dim_name(dim);
    const auto expected = layout.peers(me, dims_varied);
    const auto& group = mesh.group(dim);
    members[name] = member_world_ranks(*group);
    EXPECT_EQ(members[name], expected) << "group " << name << " on world rank " << me;
    EXPECT_EQ(group->size(), static_cast<int>(expected.size())) << name;
    EXPECT_EQ(expected[group->rank()], me) << name;
    EXPECT_EQ(mesh.coordinate(dim), group->rank()) << name;
  }
  // Without expert parallelism ep is every rank alone and dp_shard_mod_ep is dp_shard.
  if (dims.ep == 1) {
    EXPECT_EQ(mesh.size(comm::MeshDim::ep), 1);
    EXPECT_EQ(member_world_ranks(*mesh.group(comm::MeshDim::dp_shard_mod_ep)), members.at("dp_shard"));
  }
  return members;
}

TEST(Groups, MeshDpReplicate2DpShard2) {
  TITAN_REQUIRE_WORLD_SIZE(4);
  const DeviceMesh mesh({.dp_replicate = 2, .dp_shard = 2}, World::instance().group());
  const auto members = check_mesh(mesh);
  // rank = 2 * dp_replicate + dp_shard: shards are neighbours, replicas 2 apart.
  const int me = world().rank();
  const std::vector<std::vector<int64_t>> shard{{0, 1}, {0, 1}, {2, 3}, {2, 3}};
  const std::vector<std::vector<int64_t>> replicate{{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  EXPECT_EQ(members.at("dp_shard"), shard[me]);
  EXPECT_EQ(members.at("dp_replicate"), replicate[me]);
  EXPECT_EQ(members.at("dp"), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(members.at("tp"), (std::vector<int64_t>{me}));
  EXPECT_EQ(mesh.coordinate(comm::MeshDim::dp_shard), me % 2);
  EXPECT_EQ(mesh.coordinate(comm::MeshDim::dp_replicate), me / 2);
}

// Expert parallelism splits dp_shard 4 into [dp_shard_mod_ep 2, ep 2]: the ep
// peers that exchange tokens are neighbours, the ranks holding the same
// experts 2 apart.
TEST(Groups, MeshDpShard4Ep2) {
  TITAN_REQUIRE_WORLD_SIZE(4);
  const DeviceMesh mesh({.dp_shard = 4, .ep = 2}, World::instance().group());
  const auto members = check_mesh(mesh);
  const int me = world().rank();
  EXPECT_EQ(members.at("dp_shard"), (std::vector<int64_t>{0, 1, 2, 3}));
  const std::vector<std::vector<int64_t>> ep{{0, 1}, {0, 1}, {2, 3}, {2, 3}};
  const std::vector<std::vector<int64_t>> mod_ep{{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  EXPECT_EQ(member_world_ranks(*mesh.group(comm::MeshDim::ep)), ep[me]);
  EXPECT_EQ(member_world_ranks(*mesh.group(comm::MeshDim::dp_shard_mod_ep)), mod_ep[me]);
  EXPECT_EQ(mesh.coordinate(comm::MeshDim::ep), me % 2);
}

TEST(Groups, MeshTp2DpShard2) {
  TITAN_REQUIRE_WORLD_SIZE(4);
  const DeviceMesh mesh({.dp_shard = 2, .tp = 2}, World::instance().group());
  const auto members = check_mesh(mesh);
  // rank = 2 * dp_shard + tp: tensor-parallel peers are neighbours.
  const int me = world().rank();
  const std::vector<std::vector<int64_t>> tp{{0, 1}, {0, 1}, {2, 3}, {2, 3}};
  const std::vector<std::vector<int64_t>> shard{{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  EXPECT_EQ(members.at("tp"), tp[me]);
  EXPECT_EQ(members.at("dp_shard"), shard[me]);
  EXPECT_EQ(members.at("dp"), shard[me]);
  EXPECT_EQ(members.at("dp_replicate"), (std::vector<int64_t>{me}));

  // A reduction over dp_shard sums the two ranks with the same tp coordinate.
  const Tensor value = Tensor::from_vector(std::vector<int64_t>{int64_t{1} << me}, {1});
  mesh.group(comm::MeshDim::dp_shard)->all_reduce(value, ReduceOp::sum)->wait();
  EXPECT_EQ(value.to_ints()[0], (int64_t{1} << (me % 2)) + (int64_t{1} << (me % 2 + 2)));
}

// Any world size: all of it data-parallel shards (-1), or all tensor-parallel.
TEST(Groups, MeshOneDimSpansTheWorld) {
  const int n = world().size();
  const DeviceMesh shards({}, World::instance().group());
  EXPECT_EQ(shards.dims().dp_shard, n);
  check_mesh(shards);
  const DeviceMesh tensor_parallel({.dp_shard = 1, .tp = n}, World::instance().group());
  EXPECT_EQ(tensor_parallel.size(comm::MeshDim::tp), n);
  EXPECT_EQ(tensor_parallel.size(comm::MeshDim::dp), 1);
  check_mesh(tensor_parallel);
  // Degrees that do not multiply to the world are refused before any split.
  EXPECT_THROW(DeviceMesh({.dp_shard = n + 1}, World::instance().group()), Error);
}

}  // namespace groups_test
}  // namespace titan::comm
