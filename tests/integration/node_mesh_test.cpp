// Node-aware meshes in real jobs: four mpirun ranks made two "nodes" of two
// (tests/scripts/as_node.sh gives each rank a host name of its node; TCP
// between ranks, as between machines). With the data-parallel degrees left at
// their defaults the job must choose HSDP with dp_shard 2 within a node and
// dp_replicate 2 across nodes, train exactly as the same HSDP layout set by
// keys, and count the replicate all-reduces as cross-node collectives in
// metrics.jsonl, where a one-node job with that layout counts none (and the
// same calls and bytes in all). A tensor-parallel group that would span the
// nodes is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "integration/cli_job.h"

namespace titan {
namespace node_mesh_test {

namespace fs = std::filesystem;

const std::string kHsdpKeys =
    "--parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 2";

struct NodeJobs {
  fs::path work, config;
};

// The corpus and model every job here trains on, made once.
const NodeJobs& node_jobs() {
  static const NodeJobs jobs = [] {
    NodeJobs out;
    out.work = fs::path(::testing::TempDir()) / "node_mesh";
    fs::create_directories(out.work);
    testing::prepare_test_corpus(out.work / "data", out.work / "prepare.log");
    out.config = testing::write_tiny_llama_config(out.work);
    return out;
  }();
  return jobs;
}

// Whether this machine lets a process take a UTS namespace (root, or user namespaces).
bool can_fake_nodes() {
  return testing::run_command("unshare --uts true", fs::path(::testing::TempDir()) / "node_mesh_unshare.log") == 0;
}

// `titan train` of 3 steps on 4 ranks; on two nodes of two ranks when `two_nodes`.
std::string train_command(const std::string& name, bool two_nodes, const std::string& extra) {
  const NodeJobs& jobs = node_jobs();
  const fs::path dump = jobs.work / name;
  fs::remove_all(dump);
  const std::string as_node = two_nodes ? std::string(TITAN_SOURCE_DIR) + "/tests/scripts/as_node.sh 2 " : "";
  return testing::mpirun(4, "--mca btl tcp,self ") + as_node +
         testing::tiny_train_command(jobs.work / "data", jobs.config, dump, "--training.steps 3 " + extra);
}

std::vector<double> column(const std::string& name, const char* field) {
  return testing::metrics_column(node_jobs().work / name / "metrics.jsonl", field);
}

TEST(NodeMesh, DefaultIsHsdpAcrossNodesAndCountsCrossNodeCollectives) {
  if (!can_fake_nodes()) GTEST_SKIP() << "unshare --uts fails here: ranks cannot play nodes of their own";
  const std::string automatic = testing::run_ok(train_command("auto", true, ""), node_jobs().work / "auto.log");
  EXPECT_NE(automatic.find("2 nodes of 2 ranks: HSDP by default, data_parallel_shard_degree 2 within a node x "
                           "data_parallel_replicate_degree 2 across nodes"),
            std::string::npos)
      << automatic;
  const std::string explicit_run =
      testing::run_ok(train_command("explicit", true, kHsdpKeys), node_jobs().work / "explicit.log");
  EXPECT_EQ(explicit_run.find("HSDP by default"), std::string::npos) << explicit_run;
  // The same layout on one node: the reference for the counts.
  const std::string one_node =
      testing::run_ok(train_command("one_node", false, kHsdpKeys), node_jobs().work / "one_node.log");
  EXPECT_EQ(one_node.find("HSDP by default"), std::string::npos) << one_node;

  const std::vector<double> losses = column("auto", "loss");
  ASSERT_EQ(losses.size(), 3u);
  // The same layout, ranks, data and transport (TCP): the same losses, bit for bit.
  EXPECT_EQ(losses, column("explicit", "loss"));
  EXPECT_EQ(losses, column("one_node", "loss"));

  // One node: nothing crosses.
  for (const char* field : {"comm_cross_node_collectives", "comm_cross_node_bytes", "comm_cross_node_seconds"}) {
    EXPECT_EQ(column("one_node", field), std::vector<double>(3, 0.0)) << field;
  }
  const std::vector<double> all_calls = column("one_node", "comm_intra_node_collectives");
  const std::vector<double> all_bytes = column("one_node", "comm_intra_node_bytes");
  // Two nodes: rank 0's replicate group (ranks 0 and 2) spans them, its shard
  // group (0 and 1) does not; the two parts add up to the one-node job's calls and bytes.
  for (const std::string name : {"auto", "explicit"}) {
    SCOPED_TRACE(name);
    const std::vector<double> cross = column(name, "comm_cross_node_collectives");
    const std::vector<double> intra = column(name, "comm_intra_node_collectives");
    const std::vector<double> cross_bytes = column(name, "comm_cross_node_bytes");
    const std::vector<double> intra_bytes = column(name, "comm_intra_node_bytes");
    ASSERT_EQ(cross.size(), 3u);
    for (size_t step = 0; step < 3; ++step) {
      EXPECT_GT(cross[step], 0);
      EXPECT_GT(intra[step], 0);
      EXPECT_GT(cross_bytes[step], 0);
      EXPECT_EQ(cross[step] + intra[step], all_calls.at(step));
      EXPECT_EQ(cross_bytes[step] + intra_bytes[step], all_bytes.at(step));
    }
  }
}

TEST(NodeMesh, TensorParallelAcrossNodesIsRefused) {
  if (!can_fake_nodes()) GTEST_SKIP() << "unshare --uts fails here: ranks cannot play nodes of their own";
  const testing::CommandResult result = testing::run_to_completion(
      train_command("tp_across", true,
                    "--parallelism.tensor_parallel_degree 4 --parallelism.data_parallel_shard_degree 1"),
      node_jobs().work / "tp_across.log");
  testing::expect_user_error(
      result, {"parallelism.tensor_parallel_degree 4", "would span nodes 0 and 1", "2 nodes of 2 ranks each"});
}

}  // namespace node_mesh_test
}  // namespace titan
