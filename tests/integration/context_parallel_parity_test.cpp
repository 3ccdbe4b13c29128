// Context parallelism against one process: the parity job (parity_job.h)
// under CP 2 and CP 4 (both rotate methods, with and without load
// balancing), CP composed with FSDP, TP and PP, the Gemma families' windows,
// soft-caps and local RoPE, packed documents with their masks, checkpoints moved across CP degrees, and the
// configurations context parallelism refuses, with messages naming the key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_job.h"
#include "parity_job.h"

namespace titan {
namespace context_parallel_parity_test {

using testing::expect_matches;
using testing::JobRun;

const testing::ParityJobs& jobs() {
  static const testing::ParityJobs instance("context_parallel_parity");
  return instance;
}

// The context-parallel flags, with no data parallelism unless `extra` (given last, so it wins) sets some.
std::string context(int degree, const std::string& extra = "") {
  return fmt::format("--parallelism.context_parallel_degree {} --parallelism.data_parallel_shard_degree 1 {}", degree,
                     extra);
}

// Each CP rank holds 1/cp of every sequence (its loss the mean over its
// slice, the ranks' mean the whole batch's): only the order of f32 sums
// differs from one process, within expect_matches' 1e-5.
TEST(ContextParallelParity, TwoAndFourRanksMatchOneProcess) {
  const JobRun single = jobs().single("single");
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(testing::kParitySteps));
  expect_matches(single, jobs().distributed("cp2", 2, 1, context(2)), "CP 2 (allgather, headtail)", true);
  expect_matches(single,
                 jobs().distributed("cp2_ring_none", 2, 1,
                                    context(2,
                                            "--parallelism.context_parallel_rotate_method alltoall "
                                            "--parallelism.context_parallel_load_balancer none")),
                 "CP 2 (alltoall, no balancer)", true);
  const JobRun cp4 =
      jobs().distributed("cp4", 4, 1, context(4, "--parallelism.context_parallel_rotate_method alltoall"));
  expect_matches(single, cp4, "CP 4 (alltoall, headtail)", true);
  // Parameters and optimizer state are sharded over the cp ranks.
  EXPECT_LT(cp4.state_bytes, single.state_bytes / 3);
}

TEST(ContextParallelParity, ComposesWithFsdpTensorExpertAndPipelineParallelism) {
  const JobRun single = jobs().single("single_compose");
  // With gradient accumulation: two micro-batches per step.
  const std::string accumulate = "--training.global_batch_size 8 ";
  expect_matches(
      jobs().single("single_accumulate", accumulate),
      jobs().distributed("cp2_fsdp2", 4, 2, context(2, accumulate + "--parallelism.data_parallel_shard_degree 2")),
      "CP 2 x FSDP 2, accumulation 2", true);
  expect_matches(single, jobs().distributed("cp2_tp2", 4, 1, context(2, "--parallelism.tensor_parallel_degree 2")),
                 "CP 2 x TP 2", true);
  // Mixture of experts: CP 2 x EP 2, the experts sharded over dp_shard_mod_ep x cp.
  const std::string moe = "--model.name qwen3_moe --model.moe_aux_loss_coef 0 --model.moe_load_balance_coeff 1e-3 ";
  expect_matches(jobs().single("moe_single", moe),
                 jobs().distributed("cp2_ep2", 4, 2,
                                    context(2, moe + "--parallelism.data_parallel_shard_degree 2 "
                                                     "--parallelism.expert_parallel_degree 2")),
                 "CP 2 x EP 2", true);
  expect_matches(single,
                 jobs().distributed("cp2_pp2", 4, 1,
                                    context(2,
                                            "--parallelism.pipeline_parallel_degree 2 "
                                            "--parallelism.pipeline_parallel_schedule 1F1B")),
                 "CP 2 x PP 2", true);
}

// Packed documents: positions restart per document and attention stays
// inside each, across chunk and rank boundaries. Each document's last label is
// ignored, so slices hold different numbers of counted labels: the loss weighs
// every label alike across the cp ranks. With full activation checkpointing
// (the ring runs again in the recompute) and validation through the cp ranks.
// Losses and step 1 hold to 1e-5; on an AMD Zen 4 CPU one tensor's final
// weights (layers.1 w3) drift 3.0e-5 from one process after 10 AdamW steps,
// with this code and with the code before the Gemma families alike (the
// oneDNN kernels differ by CPU), so the drift allowance is 1e-4.
TEST(ContextParallelParity, PackedDocumentsCheckpointingAndValidation) {
  const std::string extra =
      "--model.document_masking true --activation_checkpoint.mode full --validation.enable true "
      "--validation.freq 3 --validation.steps 2 ";
  const JobRun single = jobs().single("single_documents", extra);
  expect_matches(single,
                 jobs().distributed("cp2_documents", 2, 1,
                                    context(2, extra + "--parallelism.context_parallel_rotate_method alltoall")),
                 "CP 2, packed documents", true, /*drift=*/1e-4);
  const std::vector<double> expected = jobs().validation_losses("single_documents"),
                            actual = jobs().validation_losses("cp2_documents");
  ASSERT_EQ(expected.size(), 2u);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-5 * expected[i]);
}

// A CP 2 checkpoint resumes in one process and a single process's under CP 4:
// the checkpoint does not depend on the CP degree.
TEST(ContextParallelParity, CheckpointsMoveAcrossContextParallelDegrees) {
  const std::string saving = testing::parity_checkpoint_flags();
  const JobRun single = jobs().single("single_saving", saving);
  jobs().distributed("cp2_saving", 2, 1, context(2, saving));
  const auto resume = [&](const std::string& from, const std::string& name, int ranks, const std::string& extra) {
    const JobRun resumed = jobs().resume(from, name, ranks, 1, saving + extra);
    testing::expect_resumes(single, resumed, name);
    ASSERT_EQ(resumed.weights.size(), single.weights.size()) << name;
  };
  resume("cp2_saving", "cp2_to_single", 1, "");
  resume("single_saving", "single_to_cp4", 4, context(4));
}

// The Gemma families' attention through ring attention: Gemma 2's soft-capped
// scores and sliding windows on alternate layers, Gemma 3's five local layers
// (own RoPE table, windows) and one global. At seq 256 the debug models'
// 128-token windows cut every chunk pair's mask somewhere. Step 1 (same
// weights) agrees to 1e-7; from step 2 on, AdamW turns f32 rounding into
// final weights up to 3.5e-5 apart (relative L2) and gradient norms up to 2e-4
// apart, so those get 5e-4; the losses stay within 1e-5 throughout, and a
// wrong mask, cap or rotation would show in step 1 already.
TEST(ContextParallelParity, GemmaWindowsSoftCapsAndLocalRopeMatchOneProcess) {
  constexpr double kGemmaDrift = 5e-4;
  for (const char* model : {"gemma2", "gemma3"}) {
    const std::string flags = fmt::format("--model.name {} --training.seq_len 256", model);
    const JobRun single = jobs().single(fmt::format("single_{}", model), flags);
    expect_matches(single, jobs().distributed(fmt::format("cp2_{}", model), 2, 1, context(2, flags)),
                   fmt::format("{} under CP 2", model), true, kGemmaDrift);
  }
}

// Muse Glimmer through ring attention: the query scale in the kernel's scale,
// 128-token windows cut by seq 256, NoPE layers, the output gate after the
// ring. Two steps (step 2 is the first with gradients beyond the zero-drawn
// final norm; later steps part at rounding level by design, see
// tests/train/muse_glimmer_training_test.cpp).
TEST(ContextParallelParity, MuseGlimmerMatchesOneProcessForTwoSteps) {
  const std::string flags = "--model.name muse_glimmer --training.seq_len 256 --training.steps 2";
  const JobRun single = jobs().single("single_muse_glimmer", flags);
  const JobRun cp = jobs().distributed("cp2_muse_glimmer", 2, 1, context(2, flags));
  ASSERT_EQ(single.losses.size(), 2u);
  ASSERT_EQ(cp.losses.size(), 2u);
  for (size_t step = 0; step < 2; ++step) {
    EXPECT_NEAR(cp.losses[step], single.losses[step], 1e-5 * single.losses[step]) << "step " << step + 1;
    EXPECT_NEAR(cp.grad_norms[step], single.grad_norms[step], 1e-5 * single.grad_norms[step]) << "step " << step + 1;
  }
}

// gpt-oss (testing::write_tiny_gpt_oss_config) through ring attention: each
// query row's sink counted once after the ring's pieces merge, layer 0's
// 16-token window cut by the 16-token load-balanced chunks of seq 64, the
// q/k/v and output biases and the MoE on each rank's slice. Three steps.
TEST(ContextParallelParity, GptOssSinksAndWindowsMatchOneProcess) {
  const std::filesystem::path config = testing::write_tiny_gpt_oss_config(jobs().dir() / "gpt_oss_tiny");
  const std::string flags = "--model.hf_config " + config.string() + " --training.seq_len 64 --training.steps 3";
  const JobRun single = jobs().single("single_gpt_oss", flags);
  const JobRun cp = jobs().distributed("cp2_gpt_oss", 2, 1, context(2, flags));
  ASSERT_EQ(single.losses.size(), 3u);
  ASSERT_EQ(cp.losses.size(), 3u);
  for (size_t step = 0; step < 3; ++step) {
    EXPECT_NEAR(cp.losses[step], single.losses[step], 1e-5 * single.losses[step]) << "step " << step + 1;
    EXPECT_NEAR(cp.grad_norms[step], single.grad_norms[step], 1e-5 * single.grad_norms[step]) << "step " << step + 1;
  }
}

TEST(ContextParallelParity, RefusedConfigurationsNameTheKey) {
  EXPECT_NE(jobs().failure("bad_length", 4, 4, context(4, "--training.seq_len 100")).find("training.seq_len"),
            std::string::npos);
  EXPECT_NE(jobs()
                .failure("bad_method", 2, 4, context(2, "--parallelism.context_parallel_rotate_method ring"))
                .find("context_parallel_rotate_method"),
            std::string::npos);
  EXPECT_NE(jobs()
                .failure("bad_balancer", 2, 4, context(2, "--parallelism.context_parallel_load_balancer zigzag"))
                .find("context_parallel_load_balancer"),
            std::string::npos);
  EXPECT_NE(jobs().failure("naive_attention", 2, 4, context(2, "--model.attention naive")).find("model.attention"),
            std::string::npos);
}

}  // namespace context_parallel_parity_test
}  // namespace titan
