// comm.mode = "fake_backend": one process plays one rank of a larger job. The
// tiny Llama is rehearsed as rank 5 of an 8-rank FSDP 4 x TP 2 job: it must
// train its steps and report its memory against the estimate, its step time,
// and the collectives the rank issues on each mesh group. What a real job of
// that size refuses, the rehearsal refuses with the same message; what is
// not a rank of the job is refused naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli_job.h"

namespace titan {
namespace rehearsal_test {

namespace fs = std::filesystem;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "rehearsal_test";
  return dir;
}

class Rehearsal : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(workdir());
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
  }

  static std::string command(const std::string& name, const std::string& extra) {
    return testing::tiny_train_command(workdir() / "data", testing::write_tiny_llama_config(workdir()),
                                       workdir() / name, "--training.steps 2 " + extra);
  }
};

// The number in `pattern`'s first group, from the rehearsal's report.
double reported(const std::string& output, const std::string& pattern) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(output, match, std::regex(pattern))) << pattern << " in\n" << output;
  return match.size() > 1 ? std::stod(match[1].str()) : -1.0;
}

TEST_F(Rehearsal, PlaysRankFiveOfAnEightRankJob) {
  const std::string output =
      testing::run_ok(command("fsdp4_tp2",
                              "--comm.mode fake_backend --comm.fake_world_size 8 --comm.fake_rank 5 "
                              "--parallelism.data_parallel_shard_degree 4 --parallelism.tensor_parallel_degree 2 "
                              "--checkpoint.enable true"),
                      workdir() / "fsdp4_tp2.log");
  EXPECT_NE(output.find("rank 5 of 8 (pp 1 x dp_replicate 1 x dp_shard 4 x cp 1 x tp 2, ep 1)"), std::string::npos)
      << output;
  EXPECT_NE(output.find("checkpoint.enable is ignored"), std::string::npos) << output;
  const fs::path checkpoints = workdir() / "fsdp4_tp2" / "checkpoint";
  EXPECT_TRUE(!fs::exists(checkpoints) || fs::is_empty(checkpoints));
  // Both steps ran and were logged as a real rank 0's would be.
  EXPECT_EQ(testing::metrics_column(workdir() / "fsdp4_tp2" / "metrics.jsonl", "loss").size(), 2u);
  const double peak = reported(output, "peak memory ([0-9.]+) GiB in tensors");
  const double estimate = reported(output, "the memory check estimated ([0-9.]+) GiB per rank");
  EXPECT_GT(peak, 0.0);
  EXPECT_LE(peak, estimate);
  EXPECT_GT(reported(output, "2 steps, median ([0-9.]+) s each"), 0.0);
  // FSDP gathers parameters and reduce-scatters gradients over its 4 ranks; sequence parallelism gathers over tp.
  EXPECT_GT(reported(output, "dp_shard_cp +all_gather +([0-9.]+) calls"), 0.0);
  EXPECT_GT(reported(output, "dp_shard_cp +reduce_scatter +([0-9.]+) calls"), 0.0);
  EXPECT_GT(reported(output, "\\btp +all_gather +([0-9.]+) calls"), 0.0);
}

// A later pipeline rank has no earlier stage to tell it the shape of what it
// receives (a real one sends it with its first activation): the rehearsal
// takes the decoder's hidden states of a micro-batch, split along the
// sequence by tp. The last stage of a PP 2 x TP 2 job trains its steps, with
// its own stages' estimate.
TEST_F(Rehearsal, PlaysTheLastPipelineStage) {
  const std::string output = testing::run_ok(
      command("pp2_tp2",
              "--comm.mode fake_backend --comm.fake_world_size 4 --comm.fake_rank 3 "
              "--parallelism.pipeline_parallel_degree 2 --parallelism.tensor_parallel_degree 2 "
              "--parallelism.data_parallel_shard_degree 1 --parallelism.pipeline_parallel_microbatch_size 1"),
      workdir() / "pp2_tp2.log");
  EXPECT_NE(output.find("rank 3 of 4 (pp 2 x dp_replicate 1 x dp_shard 1 x cp 1 x tp 2, ep 1)"), std::string::npos)
      << output;
  const double peak = reported(output, "peak memory ([0-9.]+) GiB in tensors");
  EXPECT_GT(peak, 0.0);
  EXPECT_LE(peak, reported(output, "the memory check estimated ([0-9.]+) GiB per rank"));
  EXPECT_GT(reported(output, "\\bpp +recv +([0-9.]+) calls"), 0.0);
}

// Rank 0 with checkpoints off would end a real job by gathering the whole
// model and exporting it; a rehearsal has only its own shards (the fake
// gathers repeat them), so it writes no model.
TEST_F(Rehearsal, RankZeroWritesNoModelExport) {
  const std::string output = testing::run_ok(
      command("rank0", "--comm.mode fake_backend --comm.fake_world_size 4 --parallelism.data_parallel_shard_degree 4"),
      workdir() / "rank0.log");
  EXPECT_NE(output.find("rank 0 of 4"), std::string::npos) << output;
  EXPECT_EQ(output.find("model written"), std::string::npos) << output;
  const fs::path checkpoints = workdir() / "rank0" / "checkpoint";
  EXPECT_TRUE(!fs::exists(checkpoints) || fs::is_empty(checkpoints)) << output;
}

// A deeper model whose weights, not its activations, fill the rank, rehearsed with `extra`.
std::string rehearse_deep_model(const std::string& name, const std::string& extra) {
  const fs::path config = workdir() / "deep" / "config.json";
  fs::create_directories(config.parent_path());
  std::ofstream(config) << R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "intermediate_size": 2048,
  "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 256, "tie_word_embeddings": false})";
  return testing::run_ok(
      testing::tiny_train_command(workdir() / "data", config, workdir() / "deep" / name,
                                  "--training.steps 2 --training.seq_len 32 --comm.mode fake_backend " + extra),
      workdir() / (name + ".log"));
}

// Every FSDP unit's f32 gradient bucket once stayed alive until the end of
// backward (a whole f32 model more, 40% over the estimate here). The measured
// peak, in tensors and resident, must match the estimate within 15%.
TEST_F(Rehearsal, ADeepModelsRankPeaksWithinFifteenPercentOfItsEstimate) {
  const std::string output = rehearse_deep_model("fsdp4",
                                                 "--training.local_batch_size 1 --comm.fake_world_size 4 "
                                                 "--parallelism.data_parallel_shard_degree 4");
  const double peak = reported(output, "peak memory ([0-9.]+) GiB in tensors");
  const double resident = reported(output, "GiB in tensors, ([0-9.]+) GiB resident");
  const double estimate = reported(output, "the memory check estimated ([0-9.]+) GiB per rank");
  EXPECT_NEAR(peak, estimate, 0.15 * estimate) << output;
  // Resident adds the program itself (~60 MiB, measured with a debug model whose tensors take 40 MiB).
  EXPECT_NEAR(resident, estimate, 0.15 * estimate + 0.06) << output;
}

// FSDP under pipelining: by default a stage's 6 blocks stay gathered, each
// with a full-size f32 gradient, for the step's 4 micro-batches, and one
// reduce-scatter per unit ends the step. Resharding after forward frees each
// block after its forward and reduce-scatters each micro-batch's gradients
// as they complete: a lower peak, within 15% of its own estimate, for 4
// times the reduce-scatters.
TEST_F(Rehearsal, PipelineStagesReshardingAfterForwardHoldTwoBlocksNotTheStage) {
  const std::string pipeline =
      "--training.local_batch_size 4 --comm.fake_world_size 4 --parallelism.data_parallel_shard_degree 2 "
      "--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule 1F1B "
      "--parallelism.pipeline_parallel_microbatch_size 1 --parallelism.fsdp_reshard_after_forward ";
  const std::string held = rehearse_deep_model("pp2_fsdp2_default", pipeline + "default");
  const std::string freed = rehearse_deep_model("pp2_fsdp2_always", pipeline + "always");
  const double held_peak = reported(held, "peak memory ([0-9.]+) GiB in tensors");
  const double freed_peak = reported(freed, "peak memory ([0-9.]+) GiB in tensors");
  const double freed_estimate = reported(freed, "the memory check estimated ([0-9.]+) GiB per rank");
  EXPECT_LT(reported(freed, "the memory check estimated ([0-9.]+) GiB per rank"),
            reported(held, "the memory check estimated ([0-9.]+) GiB per rank"));
  EXPECT_LT(freed_peak, held_peak - 0.02) << held << freed;
  EXPECT_NEAR(freed_peak, freed_estimate, 0.15 * freed_estimate) << freed;
  const double held_reductions = reported(held, "dp_shard_cp +reduce_scatter +([0-9.]+) calls");
  EXPECT_EQ(reported(freed, "dp_shard_cp +reduce_scatter +([0-9.]+) calls"), 4 * held_reductions) << held << freed;
}

TEST_F(Rehearsal, RefusesWhatARealJobOfThatSizeRefuses) {
  testing::expect_user_error(testing::run_to_completion(command("tp3",
                                                                "--comm.mode fake_backend --comm.fake_world_size 8 "
                                                                "--parallelism.tensor_parallel_degree 3"),
                                                        workdir() / "tp3.log"),
                             {"parallelism:", "tp 3", "the world of 8 ranks"});
  testing::expect_user_error(testing::run_to_completion(command("rank8",
                                                                "--comm.mode fake_backend --comm.fake_world_size 8 "
                                                                "--comm.fake_rank 8"),
                                                        workdir() / "rank8.log"),
                             {"comm.fake_rank 8", "0 to 7"});
  testing::expect_user_error(
      testing::run_to_completion(command("no_size", "--comm.mode fake_backend"), workdir() / "no_size.log"),
      {"comm.fake_world_size"});
  testing::expect_user_error(testing::run_to_completion(command("mode", "--comm.mode fake"), workdir() / "mode.log"),
                             {"comm.mode", "fake_backend"});
  // A rehearsal is one process: under a launcher every rank would play the same rank.
  testing::expect_user_error(testing::run_to_completion(testing::mpirun(2) + command("launched",
                                                                                     "--comm.mode fake_backend "
                                                                                     "--comm.fake_world_size 8"),
                                                        workdir() / "launched.log"),
                             {"comm.mode = fake_backend", "without a launcher", "2 processes"});
}

}  // namespace rehearsal_test
}  // namespace titan
