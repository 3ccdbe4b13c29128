// Data, tensor and expert parallelism against one process: the same job (same
// seed, same global batches, f32 everywhere) under FSDP 4, HSDP 2 x 2, DDP 2,
// TP 2, FSDP 2 x TP 2, and for a MoE model EP 2, EP 2 x FSDP 2 and EP 2 x TP 2,
// launched with mpirun, must produce the single-process loss at every step
// and the same final weights; sharding must cut each rank's parameter +
// optimizer bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "cli_job.h"
#include "parity_job.h"
#include "support/reference.h"

namespace titan {
namespace parallel_parity_test {

const testing::ParityJobs& jobs() {
  static const testing::ParityJobs instance("parallel_parity");
  return instance;
}

testing::JobRun distributed(const std::string& name, int ranks, int dp, const std::string& parallelism) {
  return jobs().distributed(name, ranks, dp, parallelism);
}
using testing::expect_matches;
using testing::JobRun;

// One test, so the single-process reference is computed once for every mesh:
// FSDP 4, HSDP 2 x 2, DDP 2, TP 2 and FSDP 2 x TP 2.
TEST(ParallelParity, EveryMeshMatchesOneProcess) {
  const JobRun single = jobs().single("single");
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(testing::kParitySteps));

  const JobRun fsdp = distributed("fsdp4", 4, 4, "--parallelism.data_parallel_shard_degree 4");
  expect_matches(single, fsdp, "FSDP 4");
  // Parameters + AdamW moments per rank: a quarter (dim-0 chunks round up; rank 0 holds the larger ones).
  ASSERT_GT(single.state_bytes, 0);
  EXPECT_LE(static_cast<double>(fsdp.state_bytes), 0.30 * static_cast<double>(single.state_bytes));

  const JobRun hsdp = distributed("hsdp", 4, 4,
                                  "--parallelism.data_parallel_replicate_degree 2 "
                                  "--parallelism.data_parallel_shard_degree 2");
  expect_matches(single, hsdp, "HSDP 2 x 2");
  // The same weights and data on every rank, averaged over the same four ranks: bitwise.
  EXPECT_EQ(hsdp.losses[0], fsdp.losses[0]);

  expect_matches(single,
                 distributed("ddp2", 2, 2,
                             "--parallelism.data_parallel_replicate_degree 2 "
                             "--parallelism.data_parallel_shard_degree 1"),
                 "DDP 2");
  expect_matches(
      single,
      distributed("tp2", 2, 1, "--parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 1"),
      "TP 2");
  expect_matches(single,
                 distributed("fsdp2_tp2", 4, 2,
                             "--parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2"),
                 "FSDP 2 x TP 2");
}

// Qwen 3 adds what llama3 debugmodel lacks: tied embeddings (one table used
// twice, vocabulary rows split for the loss), q/k norms and packed-document
// masks. One step on a 2-D mesh must give the single-process loss and
// gradient norm. (Later steps are compared for llama3 only: with tied
// embeddings many gradients sit near AdamW's eps, where the first update's
// sign follows rounding, so trajectories part at ~1e-5 after a few steps.)
TEST(ParallelParity, QwenOnTwoByTwoMeshMatchesFirstStep) {
  const std::string qwen = "--model.name qwen3 --model.document_masking true --training.steps 1";
  const JobRun single = jobs().single("qwen_single", qwen);
  const JobRun mesh = distributed(
      "qwen_mesh", 4, 2, qwen + " --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2");
  ASSERT_EQ(single.losses.size(), 1u);
  ASSERT_EQ(mesh.losses.size(), 1u);
  EXPECT_NEAR(mesh.losses[0], single.losses[0], 1e-5 * single.losses[0]);
  EXPECT_NEAR(mesh.grad_norms[0], single.grad_norms[0], 1e-5 * single.grad_norms[0]);
}

// Muse Glimmer adds the output gate (column-parallel over heads, as wq), the
// scaleless q/k and embedding norms (no parameters, on whole rows), the
// post-norms and the soft-capped head with the vocabulary split. Its init
// (TorchTitan's) zeroes the final norm, so step 1's gradient reaches only that
// norm; step 2's reaches every parameter. Two steps: later ones part at
// rounding level by design (tests/train/muse_glimmer_training_test.cpp).
TEST(ParallelParity, MuseGlimmerOnTwoByTwoMeshMatchesTwoSteps) {
  const std::string muse = "--model.name muse_glimmer --training.steps 2";
  const JobRun single = jobs().single("muse_single", muse);
  const JobRun mesh = distributed(
      "muse_mesh", 4, 2, muse + " --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2");
  ASSERT_EQ(single.losses.size(), 2u);
  ASSERT_EQ(mesh.losses.size(), 2u);
  for (size_t step = 0; step < 2; ++step) {
    EXPECT_NEAR(mesh.losses[step], single.losses[step], 1e-5 * single.losses[step]) << "step " << step + 1;
    EXPECT_NEAR(mesh.grad_norms[step], single.grad_norms[step], 1e-5 * single.grad_norms[step]) << "step " << step + 1;
  }
  EXPECT_GT(single.grad_norms[1], 2 * single.grad_norms[0]);  // step 2's gradient is no longer the norm's alone
}

// DeepSeek-V3's debug model: latent attention split by heads under TP (wq
// and wkv_b column-parallel, wo row-parallel, the low-rank projections and
// their norms replicated), its experts over EP, ring attention with q/k heads
// of 192 and values of 128 under CP. One step of each 4-rank mesh must give
// the single-process loss and gradient norm.
TEST(ParallelParity, DeepseekV3MeshesMatchFirstStep) {
  const std::string deepseek = "--model.name deepseek_v3 --training.steps 1";
  const JobRun single = jobs().single("deepseek_single", deepseek);
  ASSERT_EQ(single.losses.size(), 1u);
  for (const auto& [name, mesh_options] : std::vector<std::pair<std::string, std::string>>{
           {"deepseek_fsdp_tp", " --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2"},
           {"deepseek_cp_ep",
            " --parallelism.context_parallel_degree 2 --parallelism.data_parallel_shard_degree 2 "
            "--parallelism.expert_parallel_degree 2"}}) {
    SCOPED_TRACE(name);
    const JobRun mesh = distributed(name, 4, 2, deepseek + mesh_options);
    ASSERT_EQ(mesh.losses.size(), 1u);
    EXPECT_NEAR(mesh.losses[0], single.losses[0], 1e-5 * single.losses[0]);
    EXPECT_NEAR(mesh.grad_norms[0], single.grad_norms[0], 1e-5 * single.grad_norms[0]);
  }
}

// DeepSeek-V3's multi-token prediction (model.num_mtp_layers 1: one depth of
// the last layer's MoE form after the debug model's six layers) under FSDP 2
// x EP 2: the depth is an FSDP unit of its own after the layers and its
// experts split over ep like any layer's. One step must give the
// single-process loss (main + 0.3 x MTP) and gradient norm; tensor
// parallelism is refused, naming the key.
TEST(ParallelParity, DeepseekV3MtpUnderFsdpAndEpMatchesFirstStep) {
  const std::string mtp = "--model.name deepseek_v3 --model.num_mtp_layers 1 --training.steps 1";
  const JobRun single = jobs().single("deepseek_mtp_single", mtp);
  const JobRun mesh =
      distributed("deepseek_mtp_fsdp_ep", 2, 2,
                  mtp + " --parallelism.data_parallel_shard_degree 2 --parallelism.expert_parallel_degree 2");
  ASSERT_EQ(single.losses.size(), 1u);
  ASSERT_EQ(mesh.losses.size(), 1u);
  EXPECT_NEAR(mesh.losses[0], single.losses[0], 1e-5 * single.losses[0]);
  EXPECT_NEAR(mesh.grad_norms[0], single.grad_norms[0], 1e-5 * single.grad_norms[0]);
  const testing::CommandResult refused = testing::run_to_completion(
      testing::mpirun(2, TITAN_CLI_PATH + jobs().arguments("deepseek_mtp_tp", 4,
                                                           mtp + " --parallelism.tensor_parallel_degree 2 "
                                                                 "--parallelism.data_parallel_shard_degree 1")),
      jobs().dir() / "deepseek_mtp_tp.log");
  testing::expect_user_error(refused, {"model.num_mtp_layers", "tensor parallelism"});
}

// gpt-oss (testing::write_tiny_gpt_oss_config: sinks, a sliding and a full
// layer, biases everywhere). Under TP the row-parallel output projection's
// bias stays whole and is added once, after the reduce-scatter (each rank's
// gradient covers its tokens; the trainer sums them over tp); the sinks split
// with the query heads, the q/k/v biases with their rows; the MoE (router
// bias, experts with biases) is replicated over tp and routes each rank's
// tokens. Under EP the experts and their biases split over the ep ranks.
// Three steps of each mesh must give the single-process losses and gradient
// norms (1e-5 relative, as above; seen: ~1e-7).
TEST(ParallelParity, GptOssMeshesMatchOneProcess) {
  const std::filesystem::path config = testing::write_tiny_gpt_oss_config(jobs().dir() / "gpt_oss_tiny");
  const std::string gpt_oss = "--model.hf_config " + config.string() + " --training.seq_len 64 --training.steps 3";
  const JobRun single = jobs().single("gpt_oss_single", gpt_oss);
  ASSERT_EQ(single.losses.size(), 3u);
  for (const auto& [name, ranks, dp, mesh_options] : std::vector<std::tuple<std::string, int, int, std::string>>{
           {"gpt_oss_fsdp2_tp2", 4, 2,
            " --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2"},
           {"gpt_oss_ep2_fsdp2", 2, 2,
            " --parallelism.expert_parallel_degree 2 --parallelism.data_parallel_shard_degree 2"},
           {"gpt_oss_ep2_tp2", 4, 2,
            " --parallelism.expert_parallel_degree 2 --parallelism.tensor_parallel_degree 2 "
            "--parallelism.data_parallel_shard_degree 2"}}) {
    SCOPED_TRACE(name);
    const JobRun mesh = distributed(name, ranks, dp, gpt_oss + mesh_options);
    ASSERT_EQ(mesh.losses.size(), 3u);
    for (size_t step = 0; step < 3; ++step) {
      EXPECT_NEAR(mesh.losses[step], single.losses[step], 1e-5 * single.losses[step]) << "step " << step + 1;
      EXPECT_NEAR(mesh.grad_norms[step], single.grad_norms[step], 1e-5 * single.grad_norms[step])
          << "step " << step + 1;
    }
  }
}

// Expert parallelism on the qwen3_moe debug model (8 experts, 2 per token,
// the aux-loss-free bias on): EP 2, EP 2 x FSDP 2 and EP 2 x TP 2 against one
// process over the parity steps, then a checkpoint saved by EP 2 x FSDP 2 resumed by
// one process. Hugging Face's auxiliary loss is off here: like every
// data-parallel run of it, each rank computes it over its own tokens, which is
// not the loss over the global batch, so it would differ by design.
// Top-k routing is discontinuous: weights that differ by rounding (FSDP sums
// gradients in another order than one process) send a token to another
// expert when its scores sit within rounding of a tie, and from then on the
// runs differ by far more than rounding. With seed 42 (the default) one token does so at
// step 5 under EP 2 x FSDP 2 (the gradient norms agree to 1e-9 for four
// steps, then jump to 1e-5 apart); seed 1's first ten steps hold no such tie.
TEST(ParallelParity, ExpertParallelMeshesMatchOneProcess) {
  const std::string moe =
      "--model.name qwen3_moe --model.moe_aux_loss_coef 0 --model.moe_load_balance_coeff 1e-3 "
      "--training.seed 1 " +
      testing::parity_checkpoint_flags();
  const JobRun single = jobs().single("moe_single", moe);
  const JobRun ep2 = distributed("moe_ep2", 2, 2, moe + "--parallelism.expert_parallel_degree 2");
  expect_matches(single, ep2, "EP 2", true);
  // Each rank holds half the experts: well under the single process's state.
  EXPECT_LE(static_cast<double>(ep2.state_bytes), 0.55 * static_cast<double>(single.state_bytes));
  expect_matches(single,
                 distributed("moe_ep2_fsdp2", 4, 4,
                             moe + "--parallelism.expert_parallel_degree 2 --parallelism.data_parallel_shard_degree 4"),
                 "EP 2 x FSDP 2", true);
  expect_matches(single,
                 distributed("moe_ep2_tp2", 4, 2,
                             moe + "--parallelism.expert_parallel_degree 2 --parallelism.tensor_parallel_degree 2 "
                                   "--parallelism.data_parallel_shard_degree 2"),
                 "EP 2 x TP 2", true);

  // The mid-run checkpoint of EP 2 x FSDP 2, resumed by one process: the rest as the single run's.
  testing::expect_resumes(single, jobs().resume("moe_ep2_fsdp2", "moe_resumed", 1, 1, moe), "EP 2 x FSDP 2 resumed");
}

// One expert per ep rank, sharded over two FSDP ranks: a [1, H, D] expert
// cannot split along its first dim, so FSDP splits its rows (TorchTitan's
// dim-1 sharding of experts). Before, one rank of each pair kept the whole
// expert and the other none: the job matched, but a 235B model's rank held
// twice its share. Each rank must now hold a quarter of the state (the
// experts are three quarters of it: with the whole expert, rank 0 held 0.45).
TEST(ParallelParity, OneExpertPerRankIsShardedAlongItsRows) {
  const std::filesystem::path config =
      testing::write_tiny_moe_config(std::filesystem::path(::testing::TempDir()) / "two_experts",
                                     {.dim = 64, .expert_hidden = 1024, .experts = 2, .top_k = 1, .vocab = 2048});
  const std::string moe = "--model.name qwen3_moe --model.hf_config " + config.string() +
                          " --model.moe_aux_loss_coef 0 --model.moe_load_balance_coeff 0 --training.seed 1 " +
                          testing::parity_checkpoint_flags();
  const JobRun single = jobs().single("one_expert_single", moe);
  const JobRun sharded =
      distributed("one_expert_per_rank", 4, 4,
                  moe + "--parallelism.expert_parallel_degree 2 --parallelism.data_parallel_shard_degree 4");
  expect_matches(single, sharded, "EP 2 x FSDP 2, one expert per ep rank", true);
  EXPECT_LE(static_cast<double>(sharded.state_bytes), 0.3 * static_cast<double>(single.state_bytes));
  // Its mid-run checkpoint (experts saved as row boxes), resumed by one process: the rest as the single run's.
  testing::expect_resumes(single, jobs().resume("one_expert_per_rank", "one_expert_resumed", 1, 1, moe),
                          "one expert per ep rank resumed");
}

TEST(ParallelParity, ExpertParallelDegreeMustFitTheMeshAndTheExperts) {
  const auto failure = [](const std::string& name, int ranks, const std::string& extra) {
    return jobs().failure(name, ranks, 2, extra);
  };
  std::string output = failure("ep_world", 2, "--model.name qwen3_moe --parallelism.expert_parallel_degree 4");
  EXPECT_NE(output.find("expert_parallel_degree 4 must divide data_parallel_shard_degree 2"), std::string::npos)
      << output;
  // 8 experts do not split over 3 ranks.
  output = failure("ep_experts", 3, "--model.name qwen3_moe --parallelism.expert_parallel_degree 3");
  EXPECT_NE(output.find("8 experts, which do not split evenly over 3 ranks"), std::string::npos) << output;
  output = failure("ep_dense", 2, "--parallelism.expert_parallel_degree 2");
  EXPECT_NE(output.find("this model has no mixture-of-experts layers"), std::string::npos) << output;
}

TEST(ParallelParity, WrongMeshIsAConfigurationError) {
  const std::string output = jobs().failure("wrong", 2, 2, "--parallelism.data_parallel_shard_degree 3");
  EXPECT_NE(output.find("but the job has 2"), std::string::npos) << output;
}

// Qwen3.5's debug model (Gated DeltaNet linear layers 3 of 4) under FSDP 2,
// TP 2 and FSDP 2 x TP 2: its conv weights, A_log, dt_bias and gated norms
// shard like any parameter under FSDP; under TP the linear layers split by
// heads (projections, convs, A_log, dt_bias; out_proj row-wise). Three steps
// must give the single process's losses and gradient norms.
TEST(ParallelParity, Qwen35MeshesMatchThreeSteps) {
  const std::string qwen = "--model.name qwen3_5 --training.steps 3";
  const JobRun single = jobs().single("qwen3_5_single", qwen);
  ASSERT_EQ(single.losses.size(), 3u);
  for (const auto& [name, ranks, dp, mesh_options] : std::vector<std::tuple<std::string, int, int, std::string>>{
           {"qwen3_5_fsdp2", 2, 2, " --parallelism.data_parallel_shard_degree 2"},
           {"qwen3_5_tp2", 2, 1, " --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 1"},
           {"qwen3_5_fsdp2_tp2", 4, 2,
            " --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2"}}) {
    SCOPED_TRACE(name);
    const JobRun mesh = distributed(name, ranks, dp, qwen + mesh_options);
    expect_matches(single, mesh, name, true);
    EXPECT_LT(static_cast<double>(mesh.state_bytes), 0.6 * static_cast<double>(single.state_bytes));
  }
}

// Qwen3.5's MoE debug model: its routed experts split over EP 2 x FSDP 2,
// the shared expert and its sigmoid gate sharded like any dense weight, the
// Gated DeltaNet layers under FSDP only. Three steps against one process.
TEST(ParallelParity, Qwen35MoeExpertParallelMatchesThreeSteps) {
  const std::string qwen = "--model.name qwen3_5 --model.flavor debugmodel_moe --training.steps 3";
  const JobRun single = jobs().single("qwen3_5_moe_single", qwen);
  ASSERT_EQ(single.losses.size(), 3u);
  expect_matches(
      single,
      distributed("qwen3_5_moe_ep2", 2, 2,
                  qwen + " --parallelism.expert_parallel_degree 2 --parallelism.data_parallel_shard_degree 2"),
      "EP 2 x FSDP 2", true);
}

// Context parallelism has no plan for the Gated DeltaNet layers' recurrence
// yet: it is refused, naming the layer, before any step; so is a TP degree
// that does not divide the linear layers' key heads.
TEST(ParallelParity, Qwen35LinearLayersRefuseContextParallelismAndUnevenHeads) {
  std::string output =
      jobs().failure("qwen3_5_cp", 2, 1, "--model.name qwen3_5 --parallelism.context_parallel_degree 2");
  EXPECT_NE(output.find("context parallelism: layers.0.attention is a Gated DeltaNet linear-attention layer"),
            std::string::npos)
      << output;
  output = jobs().failure("qwen3_5_tp4", 4, 1, "--model.name qwen3_5 --parallelism.tensor_parallel_degree 4");
  EXPECT_NE(output.find("tensor parallelism: layers.0.attention has 2 key heads (4 value heads), which do not split "
                        "over 4 ranks"),
            std::string::npos)
      << output;
}

}  // namespace parallel_parity_test
}  // namespace titan
