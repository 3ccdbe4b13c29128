// ParallelDims::resolved: filling the one -1 degree, and the errors for
// degrees that cannot describe the world.
#include <gtest/gtest.h>

#include <set>

#include "titan/comm/device_mesh.h"
#include "titan/comm/local_process_group.h"

namespace titan::comm {
namespace parallel_dims_test {

// The error message of resolving `dims` over `world` ranks ("" if it resolves).
std::string resolve_error(const ParallelDims& dims, int64_t world) {
  try {
    dims.resolved(world);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

void expect_error(const ParallelDims& dims, int64_t world, const std::string& fragment) {
  const std::string message = resolve_error(dims, world);
  EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: '" << message << "'";
}

TEST(ParallelDims, FillsTheRestOfTheWorld) {
  const ParallelDims shards = ParallelDims{}.resolved(8);
  EXPECT_EQ(shards.dp_shard, 8);
  EXPECT_EQ(shards.dp(), 8);
  EXPECT_TRUE(shards.fsdp_enabled());
  EXPECT_FALSE(shards.tp_enabled());

  const ParallelDims hybrid = ParallelDims{.dp_replicate = 2, .dp_shard = -1, .tp = 2}.resolved(8);
  EXPECT_EQ(hybrid.dp_shard, 2);
  EXPECT_EQ(hybrid.dp(), 4);
  EXPECT_TRUE(hybrid.tp_enabled());

  const ParallelDims replicas = ParallelDims{.dp_replicate = -1, .dp_shard = 1}.resolved(3);
  EXPECT_EQ(replicas.dp_replicate, 3);
  EXPECT_FALSE(replicas.fsdp_enabled());

  const ParallelDims one = ParallelDims{}.resolved(1);
  EXPECT_EQ(one.dp_shard, 1);
  EXPECT_FALSE(one.fsdp_enabled());
}

TEST(ParallelDims, ProductMustBeTheWorld) {
  expect_error({.dp_shard = 2, .tp = 2}, 8,
               "pp 1 x dp_replicate 1 x dp_shard 2 x cp 1 x tp 2 = 4 ranks, but the job has 8");
  expect_error({.dp_shard = 4, .tp = 2}, 4, "= 8 ranks, but the job has 4");
  expect_error({.dp_shard = -1, .tp = 3}, 4, "does not divide the world of 4 ranks");
}

TEST(ParallelDims, ExpertParallelDividesTheShards) {
  EXPECT_EQ((ParallelDims{.dp_shard = -1, .ep = 2}.resolved(4).ep), 2);
  expect_error({.dp_shard = 2, .ep = 4}, 2, "expert_parallel_degree 4 must divide data_parallel_shard_degree 2");
  expect_error({.dp_shard = 3, .ep = 2}, 3, "expert_parallel_degree 2 must divide data_parallel_shard_degree 3");
  expect_error({.dp_shard = 2, .ep = 0}, 2, "expert_parallel_degree 0");
}

TEST(ParallelDims, AtMostOneDegreeIsTheRest) {
  expect_error({.dp_replicate = -1, .dp_shard = -1}, 4, "only one degree may be -1");
  expect_error({.dp_shard = -1, .tp = -1}, 4, "only one degree may be -1");
}

TEST(ParallelDims, DegreesArePositive) {
  expect_error({.dp_shard = 0}, 4, "degrees must be >= 1 or -1");
  expect_error({.dp_shard = 4, .tp = 0}, 4, "degrees must be >= 1 or -1");
  expect_error({.dp_replicate = -2, .dp_shard = 2}, 4, "degrees must be >= 1 or -1");
  expect_error({.pp = 0, .dp_shard = -1}, 4, "degrees must be >= 1 or -1");
}

TEST(ParallelDims, ContextAndPipelineRanksMultiplyTheOthers) {
  const ParallelDims dims = ParallelDims{.pp = 2, .dp_shard = -1, .cp = 2}.resolved(8);
  EXPECT_EQ(dims.pp, 2);
  EXPECT_EQ(dims.cp, 2);
  EXPECT_EQ(dims.dp_shard, 2);
  // Context-parallel ranks shard parameters with FSDP even without dp_shard.
  EXPECT_TRUE((ParallelDims{.dp_shard = 1, .cp = 2}.resolved(2).fsdp_enabled()));
  expect_error({.dp_shard = 2, .cp = 3}, 4, "cp 3");
}

TEST(DeviceMesh, WorldOfOneHasGroupsOfOne) {
  const DeviceMesh mesh({}, std::make_shared<LocalProcessGroup>());
  std::set<std::string> names;
  for (size_t i = 0; i < kNumMeshDims; ++i) {
    const auto dim = static_cast<MeshDim>(i);
    EXPECT_EQ(mesh.size(dim), 1) << mesh_dim_name(dim);
    EXPECT_EQ(mesh.coordinate(dim), 0) << mesh_dim_name(dim);
    names.insert(mesh_dim_name(dim));
  }
  // Each dim has a name of its own (the groups' names in flight recorder dumps).
  EXPECT_EQ(names.size(), kNumMeshDims);
  EXPECT_THROW(DeviceMesh({.dp_shard = 2}, std::make_shared<LocalProcessGroup>()), Error);
}

}  // namespace parallel_dims_test
}  // namespace titan::comm
