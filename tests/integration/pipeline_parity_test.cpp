// Pipeline parallelism against one process: the parity job (parity_job.h)
// under PP 2 and PP 4 with every schedule, PP composed with FSDP, TP, EP,
// gradient accumulation, activation checkpointing and validation, uneven and
// explicit stage splits, and checkpoints resharded across PP degrees; and the
// configurations a pipeline refuses, with messages naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_job.h"
#include "parity_job.h"

namespace titan {
namespace pipeline_parity_test {

namespace fs = std::filesystem;
using testing::expect_matches;
using testing::JobRun;

const testing::ParityJobs& jobs() {
  static const testing::ParityJobs instance("pipeline_parity");
  return instance;
}

// The pipeline flags, with no data parallelism unless `extra` (given last, so it wins) sets some.
std::string pipeline(int degree, const std::string& schedule, const std::string& extra = "") {
  return fmt::format(
      "--parallelism.pipeline_parallel_degree {} --parallelism.pipeline_parallel_schedule {} "
      "--parallelism.data_parallel_shard_degree 1 {}",
      degree, schedule, extra);
}

// Each pipeline run cuts the local batch of 4 into micro-batches of 1: the
// losses are their mean, the single process's the whole batch's, so only
// the order of f32 sums differs (the bounds of expect_matches). The V- and
// loop-shaped schedules run two stages per rank, so PP 4 splits the 6 layers
// (plus embedding and head) into 8 stages: one has only the embedding, one
// only the norm and output.
TEST(PipelineParity, EveryScheduleOnTwoAndFourRanksMatchesOneProcess) {
  const JobRun single = jobs().single("single");
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(testing::kParitySteps));
  for (int degree : {2, 4}) {
    for (const char* schedule : {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"}) {
      const std::string name = fmt::format("pp{}_{}", degree, schedule);
      const JobRun run = jobs().distributed(name, degree, 1, pipeline(degree, schedule));
      expect_matches(single, run, name, /*grad_norms=*/true);
      // Rank 0 holds the embedding and a share of the layers: less state than the whole model.
      EXPECT_LT(run.state_bytes, single.state_bytes) << name;
    }
  }
}

TEST(PipelineParity, ComposesWithFsdpTensorAndExpertParallelism) {
  const JobRun single = jobs().single("single_compose");
  // FSDP's reduce-scatter runs once per step, after every micro-batch's weight gradients.
  expect_matches(
      single,
      jobs().distributed("pp2_fsdp2", 4, 2, pipeline(2, "ZBVZeroBubble", "--parallelism.data_parallel_shard_degree 2")),
      "PP 2 x FSDP 2", true);
  // Resharding after every forward: each micro-batch's gradients reduce-scattered as they complete (linear, so
  // the same sums), counted apart from the micro-batches still in flight, split backwards and recomputed blocks too.
  const std::string reshard =
      "--parallelism.data_parallel_shard_degree 2 --parallelism.fsdp_reshard_after_forward always";
  expect_matches(single,
                 jobs().distributed("pp2_fsdp2_reshard_recompute", 4, 2,
                                    pipeline(2, "1F1B", reshard + " --activation_checkpoint.mode full")),
                 "PP 2 x FSDP 2, resharding after forward, full recomputation", true);
  expect_matches(single,
                 jobs().distributed("pp2_fsdp2_reshard_split", 4, 2, pipeline(2, "InterleavedZeroBubble", reshard)),
                 "PP 2 x FSDP 2, resharding after forward, split backward", true);
  expect_matches(single,
                 jobs().distributed("pp2_tp2", 4, 1,
                                    pipeline(2, "InterleavedZeroBubble", "--parallelism.tensor_parallel_degree 2")),
                 "PP 2 x TP 2", true);

  // Mixture of experts, the aux-loss-free bias on: PP 2 x EP 2 (EP borrowing dp_shard's 2 ranks).
  const std::string moe = "--model.name qwen3_moe --model.moe_aux_loss_coef 0 --model.moe_load_balance_coeff 1e-3 ";
  const JobRun moe_single = jobs().single("moe_single", moe);
  expect_matches(moe_single,
                 jobs().distributed("pp2_ep2", 4, 2,
                                    pipeline(2, "1F1B",
                                             moe + "--parallelism.data_parallel_shard_degree 2 "
                                                   "--parallelism.expert_parallel_degree 2")),
                 "PP 2 x EP 2", true);
}

// Gradient accumulation (two pipeline passes per step), full activation
// checkpointing inside the stages, and validation through the stages.
TEST(PipelineParity, AccumulationCheckpointingAndValidation) {
  const std::string extra =
      "--training.global_batch_size 8 --activation_checkpoint.mode full --validation.enable true "
      "--validation.freq 3 --validation.steps 2";
  const JobRun single = jobs().single("single_accumulate", extra);
  const JobRun pp = jobs().distributed("pp2_accumulate", 2, 1, pipeline(2, "ZBVZeroBubble", extra));
  expect_matches(single, pp, "PP 2, accumulation 2, full activation checkpointing", true);
  const std::vector<double> expected = jobs().validation_losses("single_accumulate"),
                            actual = jobs().validation_losses("pp2_accumulate");
  ASSERT_EQ(expected.size(), 2u);
  ASSERT_EQ(actual.size(), 2u);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-5 * expected[i]);
}

// Stages of unequal size: TorchTitan's first/last-stage discounts, layers per
// stage, and an explicit split (the command-line form of
// module_fqns_per_model_part); and a schedule read from a CSV file.
TEST(PipelineParity, UnevenAndExplicitStagesMatchOneProcess) {
  const JobRun single = jobs().single("single_uneven");
  // 6 layers + 0 + 2 = 8: four per stage, the last one holding two layers and the head.
  expect_matches(single,
                 jobs().distributed("pp2_last_less", 2, 1,
                                    pipeline(2, "1F1B",
                                             "--parallelism.pipeline_parallel_first_stage_less_layers 0 "
                                             "--parallelism.pipeline_parallel_last_stage_less_layers 2")),
                 "PP 2, last stage 2 layers fewer", true);
  // 6 + 1 + 1 = 8 over stages of 2 = 4 stages, two per rank.
  expect_matches(
      single,
      jobs().distributed("pp2_layers_per_stage", 2, 1,
                         pipeline(2, "Interleaved1F1B", "--parallelism.pipeline_parallel_layers_per_stage 2")),
      "PP 2, 2 layers per stage", true);
  expect_matches(single,
                 jobs().distributed("pp2_explicit", 2, 1,
                                    pipeline(2, "ZBVZeroBubble",
                                             "--parallelism.module_fqns_per_model_part "
                                             "'tok_embeddings,layers.0 layers.1 layers.2 layers.3 layers.4,layers.5,"
                                             "norm output'")),
                 "PP 2, explicit parts", true);
  // A schedule from a CSV file, as a user would hand one in: here ZB-V as `titan pipeline show` exports it.
  const fs::path csv = jobs().dir() / "zbv.csv";
  jobs().run(fmt::format("{} pipeline show --schedule ZBVZeroBubble --ranks 2 --microbatches 4 --export-csv {}",
                         TITAN_CLI_PATH, csv.string()));
  expect_matches(single,
                 jobs().distributed(
                     "pp2_csv", 2, 1,
                     pipeline(2, "1F1B", fmt::format("--parallelism.pipeline_parallel_schedule_csv {}", csv.string()))),
                 "PP 2, CSV schedule", true);
  // Compute actions only, in the shape of TorchTitan's custom_schedule.csv
  // (2 ranks, 4 looped stages, split backwards), with PyTorch's FSDP actions:
  // the sends and receives are added, the FSDP actions skipped.
  std::string compute_only;
  for (int rank = 0; rank < 2; ++rank) {
    const int first = rank, second = rank + 2;
    compute_only += fmt::format("{}UNSHARD,{}UNSHARD", first, second);
    for (int stage : {first, second}) {
      for (int m = 0; m < 4; ++m) compute_only += fmt::format(",{}F{}", stage, m);
    }
    for (int pair = 0; pair < 2; ++pair) {
      for (int stage : {second, first}) {
        for (int m = 2 * pair; m < 2 * pair + 2; ++m) compute_only += fmt::format(",{}I{},{}W{}", stage, m, stage, m);
      }
    }
    compute_only += fmt::format(",{}REDUCE_GRAD,{}R,{}RESHARD,{}RESHARD\n", first, second, first, second);
  }
  const fs::path compute_csv = jobs().dir() / "compute_only.csv";
  std::ofstream(compute_csv) << compute_only;
  expect_matches(
      single,
      jobs().distributed(
          "pp2_compute_only_csv", 2, 1,
          pipeline(2, "1F1B", fmt::format("--parallelism.pipeline_parallel_schedule_csv {}", compute_csv.string()))),
      "PP 2, CSV of compute actions only", true);
}

// A checkpoint saved under PP 2 resumes in one process and under PP 4 (and
// one saved by a single process resumes under PP 2): the steps after the
// checkpoint as the uninterrupted single run's.
TEST(PipelineParity, CheckpointsReshardAcrossPipelineDegrees) {
  const std::string checkpoints = testing::parity_checkpoint_flags();
  const JobRun single = jobs().single("single_checkpoint", checkpoints);
  jobs().distributed("pp2_saves", 2, 1, pipeline(2, "1F1B", checkpoints));
  const auto resume = [&](const std::string& from, const std::string& name, int ranks, const std::string& extra) {
    const JobRun resumed = jobs().resume(from, name, ranks, 1, checkpoints + extra);
    testing::expect_resumes(single, resumed, name);
    ASSERT_EQ(resumed.weights.size(), single.weights.size()) << name;
  };
  resume("pp2_saves", "pp2_to_single", 1, "");
  resume("pp2_saves", "pp2_to_pp4", 4, pipeline(4, "ZBVZeroBubble"));
  resume("single_checkpoint", "single_to_pp2", 2, pipeline(2, "InterleavedZeroBubble"));
}

// A family whose blocks differ from Llama's (Gemma 2: post-norms, GeGLU,
// scaled embeddings, soft-capped scores and logits, alternating windows)
// split into stages: the embedding scale and the final soft-cap sit on the
// first and last stages (one rank: the embeddings are tied, so the V schedule).
TEST(PipelineParity, GemmaSplitIntoStagesMatchesOneProcess) {
  const std::string flags = "--model.name gemma2 --training.seq_len 256";
  const JobRun single = jobs().single("single_gemma2", flags);
  expect_matches(single, jobs().distributed("pp2_gemma2", 2, 1, pipeline(2, "ZBVZeroBubble", flags)),
                 "gemma2 PP 2 (ZBVZeroBubble)", true,
                 /*drift=*/5e-4);  // as ContextParallelParity.Gemma* explains
}

// Muse Glimmer in two stages: the embedding norm on the first, the final
// norm, output multiplier and soft-cap on the last. Two steps, as
// ContextParallelParity.MuseGlimmer* explains.
TEST(PipelineParity, MuseGlimmerSplitIntoStagesMatchesOneProcessForTwoSteps) {
  const std::string flags = "--model.name muse_glimmer --training.steps 2";
  const JobRun single = jobs().single("single_muse_glimmer", flags);
  const JobRun pp = jobs().distributed("pp2_muse_glimmer", 2, 1, pipeline(2, "1F1B", flags));
  ASSERT_EQ(single.losses.size(), 2u);
  ASSERT_EQ(pp.losses.size(), 2u);
  for (size_t step = 0; step < 2; ++step) {
    EXPECT_NEAR(pp.losses[step], single.losses[step], 1e-5 * single.losses[step]) << "step " << step + 1;
    EXPECT_NEAR(pp.grad_norms[step], single.grad_norms[step], 1e-5 * single.grad_norms[step]) << "step " << step + 1;
  }
}

// DeepSeek-V3's debug model in two stages: latent-attention blocks, the
// dense first layer on stage 1 and MoE layers on both. One step (the
// micro-batches' routing sums in another order than one process's batch).
TEST(PipelineParity, DeepseekV3SplitIntoStagesMatchesOneProcess) {
  const std::string flags = "--model.name deepseek_v3 --training.steps 1";
  const JobRun single = jobs().single("single_deepseek_v3", flags);
  const JobRun pp = jobs().distributed("pp2_deepseek_v3", 2, 1, pipeline(2, "1F1B", flags));
  ASSERT_EQ(single.losses.size(), 1u);
  ASSERT_EQ(pp.losses.size(), 1u);
  EXPECT_NEAR(pp.losses[0], single.losses[0], 1e-5 * single.losses[0]);
  EXPECT_NEAR(pp.grad_norms[0], single.grad_norms[0], 1e-5 * single.grad_norms[0]);
}

// gpt-oss (testing::write_tiny_gpt_oss_config) in two stages: the sliding
// layer with the embedding on the first, the full layer with the final norm
// and output on the last, four micro-batches. Three steps.
TEST(PipelineParity, GptOssSplitIntoStagesMatchesOneProcess) {
  const std::filesystem::path config = testing::write_tiny_gpt_oss_config(jobs().dir() / "gpt_oss_tiny");
  const std::string flags = "--model.hf_config " + config.string() + " --training.seq_len 64 --training.steps 3";
  const JobRun single = jobs().single("single_gpt_oss", flags);
  const JobRun pp = jobs().distributed("pp2_gpt_oss", 2, 1, pipeline(2, "1F1B", flags));
  ASSERT_EQ(single.losses.size(), 3u);
  ASSERT_EQ(pp.losses.size(), 3u);
  for (size_t step = 0; step < 3; ++step) {
    EXPECT_NEAR(pp.losses[step], single.losses[step], 1e-5 * single.losses[step]) << "step " << step + 1;
    EXPECT_NEAR(pp.grad_norms[step], single.grad_norms[step], 1e-5 * single.grad_norms[step]) << "step " << step + 1;
  }
}

// Qwen3.5's debug model in two stages: Gated DeltaNet layers (their conv and
// recurrent state live within a micro-batch) and the gated full-attention
// layer split over the stages, four micro-batches. Three steps.
TEST(PipelineParity, Qwen35SplitIntoStagesMatchesOneProcess) {
  const std::string flags = "--model.name qwen3_5 --training.steps 3";
  const JobRun single = jobs().single("single_qwen3_5", flags);
  ASSERT_EQ(single.losses.size(), 3u);
  expect_matches(single, jobs().distributed("pp2_qwen3_5", 2, 1, pipeline(2, "1F1B", flags)), "PP 2", true);
}

TEST(PipelineParity, RefusedConfigurationsNameTheKey) {
  const auto fails_with = [](const std::string& name, int ranks, const std::string& extra, const std::string& message) {
    const std::string output = jobs().failure(name, ranks, 4, extra);
    EXPECT_NE(output.find(message), std::string::npos) << name << ":\n" << output;
  };
  fails_with("bad_schedule", 2, pipeline(2, "ZeroBubbleV"), "ZeroBubbleV");
  fails_with("bad_microbatch", 2, pipeline(2, "1F1B", "--parallelism.pipeline_parallel_microbatch_size 3"),
             "training.local_batch_size 4 is not a multiple of parallelism.pipeline_parallel_microbatch_size 3");
  fails_with("zero_layers_per_stage", 2,
             pipeline(2, "Interleaved1F1B", "--parallelism.pipeline_parallel_layers_per_stage 0"),
             "pipeline_parallel_layers_per_stage must be > 0");
  fails_with("parts_out_of_order", 2,
             pipeline(2, "1F1B",
                      "--parallelism.module_fqns_per_model_part 'tok_embeddings layers.1 layers.0 layers.2,"
                      "layers.3 layers.4 layers.5 norm output'"),
             "parallelism.module_fqns_per_model_part: the parts must list the modules in forward order");
  // Qwen 3 ties its output to the embeddings: only a schedule with both ends on one rank can run it.
  fails_with("tied_ends", 2, pipeline(2, "1F1B", "--model.name qwen3"),
             "the first and last stages must be on one rank");
  fails_with("moe_aux_loss", 2, pipeline(2, "1F1B", "--model.name qwen3_moe --model.moe_aux_loss_coef 0.01"),
             "set it to 0 and balance with model.moe_load_balance_coeff");
  // A CSV schedule whose second rank receives a micro-batch nobody sends.
  const fs::path csv = jobs().dir() / "broken.csv";
  std::ofstream(csv) << "0F0,0SEND_F0,0F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                        "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n";
  fails_with("broken_csv", 2,
             pipeline(2, "1F1B",
                      fmt::format("--training.local_batch_size 2 --parallelism.pipeline_parallel_schedule_csv {}",
                                  csv.string())),
             "rank 1, action 4 '1RECV_F1'");
}

}  // namespace pipeline_parity_test
}  // namespace titan
