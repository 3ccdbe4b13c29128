// Node-aware device meshes, without processes: every rank of a job is built
// as a FakeProcessGroup world, so any layout of ranks over nodes can be laid
// out here. Checked against the layout computed by hand for each case: which
// world ranks share each group, which groups span nodes, the default HSDP
// degrees on several nodes, and the refusal of a tensor-parallel group that
// would span nodes. Then the cross-node counters of CommStats and the flight
// recorder's cross-node marks, dumped, read back and shown by the analyser.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/comm/fake_process_group.h"
#include "titan/comm/flight_recorder.h"
#include "titan/comm/flight_recorder_analysis.h"

namespace titan::comm {
namespace node_mesh_test {

using Groups = std::set<std::vector<int>>;

// The mesh of every rank of a job of node_of_rank.size() ranks.
std::vector<std::unique_ptr<DeviceMesh>> every_rank(const ParallelDims& dims, const std::vector<int>& node_of_rank) {
  std::vector<std::unique_ptr<DeviceMesh>> meshes;
  const int ranks = static_cast<int>(node_of_rank.size());
  for (int rank = 0; rank < ranks; ++rank) {
    meshes.push_back(std::make_unique<DeviceMesh>(dims, std::make_shared<FakeProcessGroup>(rank, ranks), node_of_rank));
  }
  return meshes;
}

// The distinct groups along `dim` as lists of world ranks, after checking that
// every member agrees on its group and finds itself at its coordinate.
Groups groups_of(const std::vector<std::unique_ptr<DeviceMesh>>& meshes, MeshDim dim) {
  Groups groups;
  for (size_t rank = 0; rank < meshes.size(); ++rank) {
    const DeviceMesh& mesh = *meshes[rank];
    const std::vector<int>& members = mesh.members(dim);
    EXPECT_EQ(static_cast<int>(members.size()), mesh.size(dim)) << mesh_dim_name(dim);
    EXPECT_EQ(members.at(static_cast<size_t>(mesh.coordinate(dim))), static_cast<int>(rank)) << mesh_dim_name(dim);
    for (int member : members) EXPECT_EQ(meshes[static_cast<size_t>(member)]->members(dim), members);
    groups.insert(members);
  }
  return groups;
}

// Whether each rank's group along `dim` spans nodes, by rank.
std::vector<bool> spanning(const std::vector<std::unique_ptr<DeviceMesh>>& meshes, MeshDim dim) {
  std::vector<bool> out;
  for (const auto& mesh : meshes) out.push_back(mesh->group(dim)->spans_nodes());
  return out;
}

std::vector<int> block(int nodes, int per_node) {
  std::vector<int> out;
  for (int n = 0; n < nodes; ++n) out.insert(out.end(), static_cast<size_t>(per_node), n);
  return out;
}

std::vector<int> cyclic(int nodes, int per_node) {
  std::vector<int> out;
  for (int r = 0; r < nodes * per_node; ++r) out.push_back(r % nodes);
  return out;
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(NodeMesh, NodeMajorOrder) {
  EXPECT_EQ(node_major_order({0, 0, 0, 0}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(node_major_order({0, 1, 0, 1}), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(node_major_order({1, 0, 0, 1, 2, 2}), (std::vector<int>{1, 2, 0, 3, 4, 5}));
  EXPECT_EQ(ranks_per_node({0, 1, 0, 0}), (std::vector<int64_t>{3, 1}));
  EXPECT_NE(error_of([] { ranks_per_node({0, 2, 0}); }).find("node 1 holds no rank"), std::string::npos);
  EXPECT_NE(error_of([] { ranks_per_node({0, -1}); }).find("rank 1 on node -1"), std::string::npos);
}

TEST(NodeMesh, OneNodeKeepsWorldRankOrder) {
  const auto meshes = every_rank({.dp_shard = -1, .tp = 2}, block(1, 4));
  EXPECT_EQ(groups_of(meshes, MeshDim::tp), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(groups_of(meshes, MeshDim::dp_shard), (Groups{{0, 2}, {1, 3}}));
  for (size_t i = 0; i < kNumMeshDims; ++i) {
    EXPECT_EQ(spanning(meshes, static_cast<MeshDim>(i)), std::vector<bool>(4, false));
  }
  // No nodes given: one node, the same layout.
  const DeviceMesh plain({.dp_shard = -1, .tp = 2}, std::make_shared<FakeProcessGroup>(3, 4));
  EXPECT_EQ(plain.nodes(), 1);
  EXPECT_EQ(plain.members(MeshDim::tp), (std::vector<int>{2, 3}));
}

TEST(NodeMesh, TwoNodesBlockAndCyclicGetTheSameNodeGroups) {
  const ParallelDims hsdp{.dp_replicate = 2, .dp_shard = 2};
  // Block: node 0 holds ranks 0, 1.
  const auto blocked = every_rank(hsdp, block(2, 2));
  EXPECT_EQ(groups_of(blocked, MeshDim::dp_shard), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(groups_of(blocked, MeshDim::dp_replicate), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(spanning(blocked, MeshDim::dp_shard), std::vector<bool>(4, false));
  EXPECT_EQ(spanning(blocked, MeshDim::dp_replicate), std::vector<bool>(4, true));
  EXPECT_EQ(spanning(blocked, MeshDim::world), std::vector<bool>(4, true));
  EXPECT_EQ(blocked[0]->nodes(), 2);
  // Cyclic: node 0 holds ranks 0, 2; the shard groups follow the nodes, not the rank numbers.
  const auto dealt = every_rank(hsdp, cyclic(2, 2));
  EXPECT_EQ(groups_of(dealt, MeshDim::dp_shard), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(groups_of(dealt, MeshDim::dp_replicate), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(spanning(dealt, MeshDim::dp_shard), std::vector<bool>(4, false));
  EXPECT_EQ(spanning(dealt, MeshDim::dp_replicate), std::vector<bool>(4, true));
  // Tensor parallelism, cyclic: its pairs are the ranks of a node.
  const auto tp = every_rank({.dp_shard = -1, .tp = 2}, cyclic(2, 2));
  EXPECT_EQ(groups_of(tp, MeshDim::tp), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(spanning(tp, MeshDim::tp), std::vector<bool>(4, false));
  EXPECT_EQ(spanning(tp, MeshDim::dp_shard), std::vector<bool>(4, true));
}

TEST(NodeMesh, FourNodesWithPipelineContextTensorAndExperts) {
  // 4 nodes x 2, pp 2 x tp 2: the tp pairs are nodes, the pipeline stages two nodes each.
  const auto pp_tp = every_rank({.pp = 2, .dp_shard = -1, .tp = 2}, cyclic(4, 2));
  // Cyclic over 4 nodes: node n holds ranks n and n + 4.
  EXPECT_EQ(groups_of(pp_tp, MeshDim::tp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups_of(pp_tp, MeshDim::pp), (Groups{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
  EXPECT_EQ(groups_of(pp_tp, MeshDim::dp_shard), (Groups{{0, 1}, {4, 5}, {2, 3}, {6, 7}}));
  EXPECT_EQ(spanning(pp_tp, MeshDim::tp), std::vector<bool>(8, false));
  EXPECT_EQ(spanning(pp_tp, MeshDim::pp), std::vector<bool>(8, true));

  // cp 2 within a node, dp across: cp pairs are nodes.
  const auto cp = every_rank({.dp_shard = -1, .cp = 2}, block(4, 2));
  EXPECT_EQ(groups_of(cp, MeshDim::cp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups_of(cp, MeshDim::dp_shard_cp), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(spanning(cp, MeshDim::cp), std::vector<bool>(8, false));

  // 2 nodes x 4, ep 2 under the default HSDP: dp_shard 4 per node, ep pairs in it.
  std::string note;
  const ParallelDims moe = ParallelDims{.ep = 2}.resolved_on_nodes(cyclic(2, 4), &note);
  EXPECT_EQ(moe.dp_replicate, 2);
  EXPECT_EQ(moe.dp_shard, 4);
  const auto ep = every_rank(moe, cyclic(2, 4));
  // Node 0: ranks 0, 2, 4, 6 at positions 0-3.
  EXPECT_EQ(groups_of(ep, MeshDim::ep), (Groups{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
  EXPECT_EQ(groups_of(ep, MeshDim::dp_shard_mod_ep), (Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}}));
  EXPECT_EQ(groups_of(ep, MeshDim::dp_shard), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(spanning(ep, MeshDim::ep), std::vector<bool>(8, false));
  EXPECT_EQ(spanning(ep, MeshDim::dp_shard), std::vector<bool>(8, false));
  EXPECT_EQ(spanning(ep, MeshDim::dp_replicate), std::vector<bool>(8, true));
}

TEST(NodeMesh, DefaultIsHsdpAcrossNodes) {
  std::string note;
  // 2 nodes x 2, defaults: shard in a node, replicate across.
  ParallelDims dims = ParallelDims{}.resolved_on_nodes(block(2, 2), &note);
  EXPECT_EQ(dims.dp_replicate, 2);
  EXPECT_EQ(dims.dp_shard, 2);
  EXPECT_NE(note.find("2 nodes of 2 ranks: HSDP by default, data_parallel_shard_degree 2 within a node x "
                      "data_parallel_replicate_degree 2 across nodes"),
            std::string::npos)
      << note;
  // 4 nodes x 4 with tp 2: 2 shards of a tp pair per node, 4 replicas.
  dims = ParallelDims{.tp = 2}.resolved_on_nodes(block(4, 4), &note);
  EXPECT_EQ(dims.dp_shard, 2);
  EXPECT_EQ(dims.dp_replicate, 4);
  // pp 2 over 4 nodes x 2: each stage spans two nodes, shards in one.
  dims = ParallelDims{.pp = 2}.resolved_on_nodes(block(4, 2), &note);
  EXPECT_EQ(dims.dp_shard, 2);
  EXPECT_EQ(dims.dp_replicate, 2);
  const auto meshes = every_rank(dims, block(4, 2));
  EXPECT_EQ(spanning(meshes, MeshDim::dp_shard), std::vector<bool>(8, false));

  // Off: one node; an explicit degree; nodes of unequal size; tp filling the
  // node (nothing left to shard in it: FSDP over the job, not replicas).
  dims = ParallelDims{}.resolved_on_nodes(block(1, 4), &note);
  EXPECT_EQ(dims.dp_shard, 4);
  EXPECT_TRUE(note.empty());
  dims = ParallelDims{.dp_shard = 4}.resolved_on_nodes(block(2, 2), &note);
  EXPECT_EQ(dims.dp_replicate, 1);
  EXPECT_EQ(dims.dp_shard, 4);
  EXPECT_TRUE(note.empty());
  dims = ParallelDims{.dp_replicate = 4, .dp_shard = -1}.resolved_on_nodes(block(2, 2), &note);
  EXPECT_EQ(dims.dp_replicate, 4);
  EXPECT_EQ(dims.dp_shard, 1);
  EXPECT_TRUE(note.empty());
  dims = ParallelDims{}.resolved_on_nodes({0, 0, 0, 1}, &note);
  EXPECT_EQ(dims.dp_shard, 4);
  EXPECT_TRUE(note.empty());
  dims = ParallelDims{.tp = 2}.resolved_on_nodes(block(2, 2), &note);
  EXPECT_EQ(dims.dp_replicate, 1);
  EXPECT_EQ(dims.dp_shard, 2);
  EXPECT_TRUE(note.empty());
  // A job that does not fit is resolve()'s error, as on one node.
  EXPECT_NE(error_of([] { ParallelDims{.tp = 3}.resolved_on_nodes(block(2, 2)); }).find("does not divide"),
            std::string::npos);
}

TEST(NodeMesh, TensorParallelAcrossNodesIsRefused) {
  const std::string spans = error_of([] { every_rank({.dp_shard = 1, .tp = 4}, block(2, 2)); });
  EXPECT_NE(spans.find("parallelism.tensor_parallel_degree 4"), std::string::npos) << spans;
  EXPECT_NE(spans.find("world ranks 0,1,2,3 would span nodes 0 and 1"), std::string::npos) << spans;
  EXPECT_NE(spans.find("2 nodes of 2 ranks each"), std::string::npos) << spans;
  // Nodes of unequal size: 3 + 1 ranks, the second tp pair would span them.
  const std::string uneven = error_of([] { every_rank({.dp_shard = -1, .tp = 2}, {0, 0, 0, 1}); });
  EXPECT_NE(uneven.find("world ranks 2,3"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("2 nodes holding 3, 1 ranks"), std::string::npos) << uneven;
  // Context parallelism may span nodes (its ring overlaps attention).
  EXPECT_EQ(error_of([] { every_rank({.dp_shard = 1, .cp = 4}, block(2, 2)); }), "");
}

// A group's calls count as cross-node once it spans nodes, apart from the
// others; the flight recorder marks them, and the analyser shows it.
TEST(NodeMesh, CrossNodeCollectivesAreCountedAndRecorded) {
  FlightRecorder& recorder = FlightRecorder::instance();
  recorder.configure(64, ::testing::TempDir());
  const DeviceMesh mesh({.dp_replicate = 2, .dp_shard = 2}, std::make_shared<FakeProcessGroup>(0, 4), block(2, 2));
  const Tensor grads = Tensor::zeros({256});  // 1 KiB of f32
  mesh.group(MeshDim::dp_replicate)->all_reduce(grads, ReduceOp::avg)->wait();
  mesh.group(MeshDim::dp_replicate)->all_reduce(grads, ReduceOp::avg)->wait();
  const Tensor shard = Tensor::zeros({128});
  mesh.group(MeshDim::dp_shard)->reduce_scatter(shard, grads, ReduceOp::sum)->wait();

  const CommStats across = mesh.group(MeshDim::dp_replicate)->stats();
  EXPECT_EQ(across.collectives, 2);
  EXPECT_EQ(across.cross_node_collectives, 2);
  EXPECT_EQ(across.bytes, 2 * 1024);
  EXPECT_EQ(across.cross_node_bytes, 2 * 1024);
  const CommStats within = mesh.group(MeshDim::dp_shard)->stats();
  EXPECT_EQ(within.collectives, 1);
  EXPECT_EQ(within.bytes, 1024);  // the larger buffer: the input
  EXPECT_EQ(within.cross_node_collectives, 0);
  EXPECT_EQ(within.cross_node_bytes, 0);
  CommStats total = across;
  total += within;
  EXPECT_EQ(total.collectives, 3);
  EXPECT_EQ(total.cross_node_collectives, 2);

  // The records, dumped as JSON and read back.
  FlightDump dump = flight_dump_from_json(flight_dump_to_json(recorder.snapshot("test")), "test");
  recorder.configure(0, ::testing::TempDir());
  ASSERT_EQ(dump.records.size(), 3u);
  EXPECT_TRUE(dump.records[0].cross_node);
  EXPECT_TRUE(dump.records[1].cross_node);
  EXPECT_FALSE(dump.records[2].cross_node);
  EXPECT_TRUE(dump.groups[static_cast<size_t>(dump.records[0].group)].spans_nodes);
  EXPECT_FALSE(dump.groups[static_cast<size_t>(dump.records[2].group)].spans_nodes);
  // The analyser names the groups that span nodes and counts the records that crossed.
  dump.world_size = 1;
  const FlightAnalysis analysis = analyse_flight_dumps({dump});
  EXPECT_NE(analysis.report.find("3 records (2 crossed nodes)"), std::string::npos) << analysis.report;

  // A dump without the marks (written before nodes were tracked) reads as "did not cross".
  std::string old = flight_dump_to_json(dump);
  for (const std::string field :
       {",\"cross_node\":true", ",\"cross_node\":false", ",\"spans_nodes\":true", ",\"spans_nodes\":false"}) {
    for (size_t at = old.find(field); at != std::string::npos; at = old.find(field)) old.erase(at, field.size());
  }
  const FlightDump read = flight_dump_from_json(old, "old");
  ASSERT_EQ(read.records.size(), 3u);
  EXPECT_FALSE(read.records[0].cross_node);
}

}  // namespace node_mesh_test
}  // namespace titan::comm
