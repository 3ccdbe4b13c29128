// FLUX under data and context parallelism against one process: the same job
// (same seed, same global batches of a prepared dataset, f32), run by `titan
// train` in one process and under mpirun with FSDP 2, DDP 2, FSDP 2 with
// activation checkpointing, CP 2 (both ring methods) and FSDP 2 x CP 2, must
// log the single process's loss at every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_job.h"
#include "titan/models/flux/flux_diffusers_config.h"
#include "titan/ops/random.h"
#include "titan/train/flux/flux_dataset.h"

namespace titan {
namespace flux_parity_test {

namespace fs = std::filesystem;

Tensor normal(const Shape& shape, uint64_t seed) {
  Generator generator(seed);
  const Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, 1.0, generator);
  return t;
}

// 16 examples of 4-channel 4x4 latents (32-pixel images: 4 image tokens), 8 T5 states of 16, CLIP 16; a 2 + 2
// block transformer of width 64.
struct FluxJobFiles {
  fs::path dir, data, config;
};

const FluxJobFiles& files() {
  static const FluxJobFiles instance = [] {
    FluxJobFiles f;
    f.dir = fs::path(::testing::TempDir()) / "flux_parity";
    fs::remove_all(f.dir);
    fs::create_directories(f.dir);
    train::flux::FluxDataset d;
    d.img_size = 32;
    d.encoders_fingerprint = "test";
    d.train = {normal({16, 4, 4, 4}, 1), normal({16, 8, 16}, 2), normal({16, 16}, 3), {}};
    for (int i = 0; i < 16; ++i) d.train.captions.push_back("example " + std::to_string(i));
    d.empty_t5 = Tensor::zeros({8, 16});
    d.empty_clip = Tensor::zeros({16});
    f.data = f.dir / "data";
    train::flux::write_flux_dataset(f.data.string(), d);
    models::flux::FluxConfig config;
    config.in_channels = config.out_channels = 16;
    config.hidden_size = 64;
    config.num_heads = 4;
    config.axes_dim = {4, 6, 6};
    config.depth = 2;
    config.depth_single_blocks = 2;
    config.context_in_dim = 16;
    config.vec_in_dim = 16;
    f.config = f.dir / "transformer_config.json";
    std::ofstream(f.config) << models::flux::diffusers_flux_config_json(config);
    return f;
  }();
  return instance;
}

struct JobLosses {
  std::vector<double> losses;
  std::string output;
};

// The command of `titan train` for the tiny FLUX, 4 steps of a global batch of 4 (each of `dp` ranks 4 / dp),
// `extra` last.
std::string job_command(const std::string& name, int ranks, int dp, const std::string& extra) {
  const FluxJobFiles& f = files();
  return fmt::format(
      "{}{} train --model.name flux --model.hf_config {} --training.dataset_path {} --training.img_size 32 "
      "--training.local_batch_size {} --training.steps 4 --training.seed 7 --training.classifier_free_guidance_prob "
      "0.3 --optimizer.lr 3e-3 --lr_scheduler.warmup_steps 1 --metrics.peak_tflops 1 --metrics.progress false "
      "--job.dump_folder {} {}",
      ranks > 1 ? testing::mpirun(ranks) + " " : "", TITAN_CLI_PATH, f.config.string(), f.data.string(), 4 / dp,
      (f.dir / name).string(), extra);
}

JobLosses run_job(const std::string& name, int ranks, int dp, const std::string& extra = "") {
  const FluxJobFiles& f = files();
  JobLosses run;
  run.output = testing::run_ok(job_command(name, ranks, dp, extra), f.dir / (name + ".log"));
  run.losses = testing::metrics_column(f.dir / name / "metrics.jsonl", "loss");
  return run;
}

void expect_same_losses(const JobLosses& expected, const JobLosses& actual, const std::string& what) {
  ASSERT_EQ(actual.losses.size(), expected.losses.size()) << what << "\n" << actual.output;
  // f32: only the order of the sums over examples and ranks differs.
  for (size_t i = 0; i < expected.losses.size(); ++i) {
    EXPECT_NEAR(actual.losses[i], expected.losses[i], 1e-5 * expected.losses[i]) << what << ", step " << i + 1;
  }
}

// model.converters on FLUX, as TorchTitan applies them to every model: each
// float8 recipe trains the Linears near the high-precision run without being
// it (fp8 roundings move the tiny model's loss by about a percent; 5% leaves
// room and still catches a scale applied twice or not at all), and FSDP 2's
// float8 all-gather (scales precomputed) gives what FSDP 2 gathering the f32
// weights gives: in f32 compute the casts see the same whole weights.
TEST(FluxParity, Float8RecipesTrainNearHighPrecisionAndTheFloat8AllGatherMatches) {
  const JobLosses high = run_job("float8_high", 1, 1);
  const std::string float8 = "--model.converters quantize.linear.float8";
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::string>>{
           {"float8_tensorwise", float8},
           {"float8_rowwise", float8 + " --quantize.linear.float8.recipe_name rowwise"}}) {
    const JobLosses run = run_job(name, 1, 1, extra);
    EXPECT_NE(run.output.find("titan: quantize.linear.float8 ("), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find(" on 0 Linear(s)"), std::string::npos) << run.output;
    ASSERT_EQ(run.losses.size(), high.losses.size()) << run.output;
    double largest_gap = 0.0;
    for (size_t i = 0; i < high.losses.size(); ++i) {
      EXPECT_NEAR(run.losses[i], high.losses[i], 0.05 * high.losses[i]) << name << ", step " << i + 1;
      largest_gap = std::max(largest_gap, std::fabs(run.losses[i] - high.losses[i]) / high.losses[i]);
    }
    EXPECT_GT(largest_gap, 1e-6) << name << " trained exactly as high precision: nothing was converted";
  }
  const std::string fsdp = float8 + " --parallelism.data_parallel_shard_degree 2";
  expect_same_losses(run_job("float8_fsdp2", 2, 2, fsdp),
                     run_job("float8_fsdp2_gather", 2, 2,
                             fsdp + " --quantize.linear.float8.enable_fsdp_float8_all_gather true "
                                    "--quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp true"),
                     "FSDP 2 with the float8 all-gather");
}

TEST(FluxParity, DataParallelMeshesMatchOneProcess) {
  const JobLosses single = run_job("single", 1, 1);
  ASSERT_EQ(single.losses.size(), 4u) << single.output;
  expect_same_losses(single, run_job("fsdp2", 2, 2, "--parallelism.data_parallel_shard_degree 2"), "FSDP 2");
  expect_same_losses(
      single,
      run_job("ddp2", 2, 2,
              "--parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 1"),
      "DDP 2");
  expect_same_losses(
      single, run_job("fsdp2_ac", 2, 2, "--parallelism.data_parallel_shard_degree 2 --activation_checkpoint.mode full"),
      "FSDP 2 + full activation checkpointing");
}

// Each cp rank holds half of the 8 text and of the 4 image tokens; the joint
// attention runs as ring attention. The loss is the mean of the ranks' halves.
TEST(FluxParity, ContextParallelMatchesOneProcess) {
  const JobLosses single = run_job("single_for_cp", 1, 1);
  ASSERT_EQ(single.losses.size(), 4u) << single.output;
  const std::string cp2 = "--parallelism.context_parallel_degree 2 --parallelism.data_parallel_shard_degree 1";
  const JobLosses allgather = run_job("cp2", 2, 1, cp2);
  EXPECT_NE(allgather.output.find("dp_shard 1 x cp 2"), std::string::npos) << allgather.output;
  expect_same_losses(single, allgather, "CP 2");
  expect_same_losses(single,
                     run_job("cp2_alltoall", 2, 1, cp2 + " --parallelism.context_parallel_rotate_method alltoall"),
                     "CP 2, alltoall ring");
  expect_same_losses(single,
                     run_job("fsdp2_cp2", 4, 2,
                             "--parallelism.context_parallel_degree 2 --parallelism.data_parallel_shard_degree 2 "
                             "--activation_checkpoint.mode full"),
                     "FSDP 2 x CP 2 + full activation checkpointing");
  // 4 ranks would hold 2 text and 1 image token each: ring attention needs an even count.
  testing::expect_user_error(testing::run_to_completion(job_command("cp4", 4, 1,
                                                                    "--parallelism.context_parallel_degree 4 "
                                                                    "--parallelism.data_parallel_shard_degree 1"),
                                                        files().dir / "cp4.log"),
                             {"context_parallel_degree 4", "encoder.max_t5_encoding_len", "training.img_size"});
}

}  // namespace flux_parity_test
}  // namespace titan
