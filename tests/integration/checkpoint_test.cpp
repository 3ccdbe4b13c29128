// Checkpoints end to end, through real `titan train` processes (alone and
// under mpirun): exact resume (bitwise) after a stop at a step or a SIGTERM,
// resharding between meshes, crash safety, bad input, async vs blocking saves.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli_job.h"
#include "support/reference.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/allocator.h"
#include "titan/train/checkpointer.h"
#include "titan/train/hf_convert.h"

namespace titan {
namespace checkpoint_test {

namespace fs = std::filesystem;
using testing::file_text;
using testing::metrics_column;
using testing::read_all_tensors;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "checkpoint_test";
  return dir;
}

// 20 steps of llama3 debugmodel at 2 x 32 tokens in f32 with a cosine decay,
// so the schedule, loader position and moments all matter for the later steps.
std::string job(const std::string& name, const std::string& extra = "") {
  return fmt::format(
      " train --config {}/configs/llama3_debug.toml --job.dump_folder {} --training.dataset_path {} "
      "--model.tokenizer_path {}/tokenizer.json --training.steps 20 --training.seq_len 32 "
      "--training.local_batch_size 2 --training.mixed_precision_param f32 --model.document_masking false "
      "--validation.enable false --lr_scheduler.warmup_steps 3 --metrics.peak_tflops 1 --metrics.progress false "
      "--checkpoint.enable true --checkpoint.interval 100 {}",
      TITAN_SOURCE_DIR, (workdir() / name).string(), (workdir() / "data").string(), (workdir() / "data").string(),
      extra);
}

std::string run(const std::string& command) { return testing::run_ok(command, workdir() / "last_command.log"); }

std::string step_folder(const std::string& name, int64_t step) {
  return (workdir() / name / "checkpoint" / checkpoint::step_folder_name(step)).string();
}

// Every tensor of a checkpoint, whole, read the way a one-process job reads it.
std::map<std::string, Tensor> load_whole(const std::string& folder) {
  const checkpoint::CheckpointMetadata metadata =
      checkpoint::parse_checkpoint_metadata(file_text(fs::path(folder) / "metadata.json"), folder);
  std::vector<train::StateTensor> tensors;
  std::map<std::string, Tensor> result;
  for (const auto& [name, tensor] : metadata.tensors) {
    train::StateTensor t;
    t.name = name;
    t.part = name.substr(0, name.find('.'));
    t.tensor = Tensor::empty(tensor.shape, tensor.dtype);
    t.global_shape = tensor.shape;
    t.offsets.assign(tensor.shape.size(), 0);
    tensors.push_back(t);
    result[name] = t.tensor;
  }
  train::Checkpointer::load(folder, tensors, {"model", "optimizer"});
  return result;
}

// Job `name`'s weights at step 20, its last save: the model export
// (last_save_model_only, the default) or the full training state.
std::map<std::string, Tensor> final_weights(const std::string& name) {
  const fs::path folder = step_folder(name, 20);
  if (fs::exists(folder / "model.safetensors")) return read_all_tensors(folder / "model.safetensors");
  if (!fs::exists(folder / checkpoint::kMetadataFile)) return {};
  std::map<std::string, Tensor> weights;
  for (auto& [stored, tensor] : load_whole(folder.string())) {
    if (stored.starts_with("model.")) weights[stored.substr(6)] = tensor;
  }
  return weights;
}

// Losses and final weights bitwise equal (an export's weights against a full
// checkpoint's too: the export's whole tensors, gathered from the shards as
// they stream out, against the checkpoint's read back from every rank's boxes).
void expect_same_run(const std::string& expected, const std::string& actual) {
  SCOPED_TRACE(actual);
  const auto losses = metrics_column(workdir() / actual / "metrics.jsonl", "loss");
  EXPECT_EQ(losses, metrics_column(workdir() / expected / "metrics.jsonl", "loss"));
  EXPECT_EQ(losses.size(), 20u);
  const auto weights = final_weights(actual);
  const auto reference = final_weights(expected);
  ASSERT_EQ(weights.size(), reference.size());
  ASSERT_FALSE(weights.empty());
  for (const auto& [name, tensor] : reference) {
    ASSERT_TRUE(weights.count(name)) << name;
    EXPECT_EQ(weights.at(name).to_floats(), tensor.to_floats()) << name;
  }
}

// One sequence per data-parallel rank: a global batch of 4.
const std::string kFsdp4 = "--parallelism.data_parallel_shard_degree 4 --training.local_batch_size 1";

class Checkpoints : public ::testing::Test {
 protected:
  // CTest runs each test in its own process: the reference run is shared
  // between them, and redone only when titan or this test changed.
  static void SetUpTestSuite() {
    const std::string stamp = fmt::format("{} {}", fs::last_write_time(kCli).time_since_epoch().count(),
                                          fs::last_write_time("/proc/self/exe").time_since_epoch().count());
    if (file_text(workdir() / "stamp") == stamp) return;
    fs::remove_all(workdir());
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
    // The uninterrupted reference, saving (blocking) every 5 steps, alone and under FSDP 4: one process's
    // last save the full state (last_save_model_only false), FSDP 4's the model export (the default).
    run(kCli + job("straight", "--checkpoint.interval 5 --checkpoint.last_save_model_only false"));
    run(testing::mpirun(4) + kCli + job("fsdp_straight", kFsdp4 + " --checkpoint.interval 5"));
    std::ofstream(workdir() / "stamp") << stamp;
  }
  // Each test's own folders start empty.
  static void fresh(const std::vector<std::string>& names) {
    for (const std::string& name : names) fs::remove_all(workdir() / name);
  }
};

TEST_F(Checkpoints, ResumeAfterStopAtAStepIsBitwiseExact) {
  fresh({"stop_at_10"});
  // The test hook raises a real SIGTERM after step 10: the run saves step 10 and exits 0.
  const std::string first = run("TITAN_TEST_SIGTERM_AT_STEP=10 " + kCli + job("stop_at_10"));
  EXPECT_NE(first.find("stopping after step 10"), std::string::npos) << first;
  EXPECT_TRUE(checkpoint::is_complete_checkpoint(step_folder("stop_at_10", 10)));
  const std::string second = run(kCli + job("stop_at_10"));
  EXPECT_NE(second.find("(step 10,"), std::string::npos) << second;
  expect_same_run("straight", "stop_at_10");
}

TEST_F(Checkpoints, ResumeAfterExternalSigtermIsBitwiseExact) {
  fresh({"sigterm"});
  const fs::path log = workdir() / "sigterm.log";
  const pid_t child = testing::start_command(kCli + job("sigterm"), log);
  ASSERT_GT(child, 0);
  // Signal once a few steps are logged: the run is mid-training (20 steps take seconds).
  const fs::path metrics = workdir() / "sigterm" / "metrics.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (metrics_column(metrics, "loss").size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(child, SIGTERM);
  const int status = testing::wait_command(child);
  const std::string output = file_text(log);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  const size_t stopped = metrics_column(metrics, "loss").size();
  EXPECT_LT(stopped, 20u) << "the signal came too late to test anything";
  EXPECT_NE(output.find("stopping after step"), std::string::npos) << output;
  EXPECT_TRUE(checkpoint::is_complete_checkpoint(step_folder("sigterm", static_cast<int64_t>(stopped))));
  run(kCli + job("sigterm"));
  expect_same_run("straight", "sigterm");
}

// The qwen3_moe debug model with both load balancers: the aux-loss-free
// expert bias is model state, so a resume that lost it would route tokens to
// other experts from step 11 on.
TEST_F(Checkpoints, MixtureOfExpertsResumeKeepsTheExpertBias) {
  fresh({"moe_straight", "moe_stop_at_10"});
  const std::string moe =
      "--model.name qwen3_moe --model.flavor debugmodel --model.moe_load_balance_coeff 1e-2 "
      "--model.moe_aux_loss_coef 0.01";
  run(kCli + job("moe_straight", moe));
  run("TITAN_TEST_SIGTERM_AT_STEP=10 " + kCli + job("moe_stop_at_10", moe));
  const std::string second = run(kCli + job("moe_stop_at_10", moe));
  EXPECT_NE(second.find("(step 10,"), std::string::npos) << second;
  expect_same_run("moe_straight", "moe_stop_at_10");
  const auto weights = read_all_tensors(fs::path(step_folder("moe_straight", 20)) / "model.safetensors");
  ASSERT_TRUE(weights.count("layers.1.moe.expert_bias"));
  bool moved = false;
  for (float b : weights.at("layers.1.moe.expert_bias").to_floats()) moved = moved || b != 0.0f;
  EXPECT_TRUE(moved) << "the expert bias never moved: the test would not see it lost";
}

TEST_F(Checkpoints, CrashDuringWriteKeepsThePreviousCheckpoint) {
  fresh({"crash"});
  std::string output;
  const int status = testing::run_command(
      "TITAN_TEST_DIE_DURING_CHECKPOINT_WRITE=10 " + kCli + job("crash", "--checkpoint.interval 5"),
      workdir() / "crash.log", &output);
  EXPECT_NE(status, 0) << output;
  EXPECT_TRUE(checkpoint::is_complete_checkpoint(step_folder("crash", 5)));
  const std::string partial = step_folder("crash", 10) + ".partial";
  EXPECT_TRUE(fs::exists(partial));
  EXPECT_FALSE(fs::exists(step_folder("crash", 10)));
  // The record of step 10 was written before its save started, so the kill lost none.
  const std::vector<double> steps = metrics_column(workdir() / "crash" / "metrics.jsonl", "step");
  ASSERT_FALSE(steps.empty()) << output;
  EXPECT_EQ(steps.back(), 10.0) << output;
  // The rerun removes the partial folder its predecessor abandoned (once: it is
  // not warned about at every later resume), resumes from step 5 and ends where
  // the straight run did.
  const std::string resumed = run(kCli + job("crash", "--checkpoint.interval 5"));
  EXPECT_NE(resumed.find("removed incomplete checkpoint " + partial), std::string::npos) << resumed;
  EXPECT_NE(resumed.find("(step 5,"), std::string::npos) << resumed;
  EXPECT_FALSE(fs::exists(partial));
  const std::string again = run(kCli + job("crash", "--checkpoint.interval 5"));
  EXPECT_EQ(again.find("incomplete checkpoint"), std::string::npos) << again;
  const auto weights = final_weights("crash");
  const auto reference = final_weights("straight");
  ASSERT_EQ(weights.size(), reference.size());
  ASSERT_FALSE(weights.empty());
  for (const auto& [name, tensor] : reference) EXPECT_EQ(weights.at(name).to_floats(), tensor.to_floats()) << name;
}

TEST_F(Checkpoints, AsyncSaveWritesTheSameFilesAsBlocking) {
  fresh({"async"});
  const std::string output = run(kCli + job("async",
                                            "--checkpoint.interval 5 --checkpoint.async_mode async "
                                            "--checkpoint.keep_latest_k 3 --checkpoint.last_save_model_only false"));
  // keep_latest_k = 3: step 5 is gone, 10, 15 and 20 remain.
  EXPECT_FALSE(fs::exists(step_folder("async", 5)));
  for (int64_t step : {10, 15}) {
    for (const char* file : {"rank-00000.safetensors", "metadata.json"}) {
      EXPECT_EQ(file_text(fs::path(step_folder("async", step)) / file),
                file_text(fs::path(step_folder("straight", step)) / file))
          << step << " " << file;
    }
  }
  EXPECT_EQ(metrics_column(workdir() / "async" / "metrics.jsonl", "loss"),
            metrics_column(workdir() / "straight" / "metrics.jsonl", "loss"));
  const auto stalls = metrics_column(workdir() / "async" / "metrics.jsonl", "checkpoint_stall_seconds");
  // Step 11 reports the time the save after step 10 held the run up (step
  // 10's record was written before that save started).
  EXPECT_EQ(stalls.at(9), 0.0);
  EXPECT_GT(stalls.at(10), 0.0);
}

// A copy of the straight run's step-20 checkpoint, damaged by `damage`, must
// be refused with `message` naming what is wrong, exit non-zero, and change nothing.
void expect_refused(const std::string& name, const std::function<void(const fs::path&)>& damage,
                    const std::vector<std::string>& messages, const std::string& extra = "") {
  SCOPED_TRACE(name);
  fs::remove_all(workdir() / name);
  const fs::path folder = step_folder(name, 20);
  fs::create_directories(fs::path(folder).parent_path());
  fs::copy(step_folder("straight", 20), folder);
  damage(folder);
  std::map<std::string, std::string> before;
  for (const auto& entry : fs::directory_iterator(folder)) before[entry.path().string()] = file_text(entry.path());
  std::string output;
  const int status = testing::run_command(kCli + job(name, extra), workdir() / (name + ".log"), &output);
  EXPECT_NE(status, 0) << output;
  for (const std::string& message : messages) EXPECT_NE(output.find(message), std::string::npos) << output;
  std::map<std::string, std::string> after;
  for (const auto& entry : fs::directory_iterator(folder)) after[entry.path().string()] = file_text(entry.path());
  EXPECT_TRUE(before == after) << "the checkpoint changed";
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(folder).parent_path()), fs::directory_iterator()), 1);
}

TEST_F(Checkpoints, BadInputIsRefusedNamingFileAndTensor) {
  const std::string rank_file = "rank-00000.safetensors";
  expect_refused("truncated",
                 [&](const fs::path& f) { fs::resize_file(f / rank_file, fs::file_size(f / rank_file) - 4096); },
                 {rank_file + ": file is truncated: tensor 'optimizer."});
  expect_refused("flipped",
                 [&](const fs::path& f) {
                   std::fstream file(f / rank_file, std::ios::in | std::ios::out | std::ios::binary);
                   file.seekg(static_cast<std::streamoff>(fs::file_size(f / rank_file) / 2));
                   char byte = 0;
                   file.read(&byte, 1);
                   byte = static_cast<char>(byte ^ 0x10);
                   file.seekp(static_cast<std::streamoff>(fs::file_size(f / rank_file) / 2));
                   file.write(&byte, 1);
                 },
                 {rank_file + ": checksum mismatch in tensor '"});
  expect_refused("no_metadata", [](const fs::path& f) { fs::remove(f / "metadata.json"); }, {"missing metadata.json"});
  expect_refused(
      "other_model", [](const fs::path&) {},
      {"tensor 'model.tok_embeddings.weight' has shape [512,256] in the checkpoint but [640,256] in this model"},
      "--model.vocab_size 640");
}

TEST_F(Checkpoints, FsdpResumeIsBitwiseExact) {
  fresh({"fsdp_stop"});
  // SIGTERM reaches rank 2 only: the ranks agree through the per-step flag all-reduce.
  const std::string first = run(testing::mpirun(4, "-x TITAN_TEST_SIGTERM_AT_STEP=10 -x TITAN_TEST_SIGTERM_RANK=2 ") +
                                kCli + job("fsdp_stop", kFsdp4));
  EXPECT_NE(first.find("stopping after step 10"), std::string::npos) << first;
  // The resumed run's last save is the full state: its weights, read back from
  // the four ranks' boxes, equal what the straight run's export gathered.
  run(testing::mpirun(4) + kCli + job("fsdp_stop", kFsdp4 + " --checkpoint.last_save_model_only false"));
  ASSERT_TRUE(checkpoint::is_complete_checkpoint(step_folder("fsdp_stop", 20)));
  ASSERT_TRUE(fs::exists(fs::path(step_folder("fsdp_straight", 20)) / "model.safetensors"));
  expect_same_run("fsdp_straight", "fsdp_stop");
}

// Under pipeline parallelism (PP 2, the zero-bubble V schedule: split
// backward, two stages per rank), SIGTERM reaching the rank of the middle
// stages saves every stage, and the resumed run is bitwise the uninterrupted one.
TEST_F(Checkpoints, PipelineResumeAfterSigtermIsBitwiseExact) {
  fresh({"pp_straight", "pp_stop"});
  const std::string pp =
      "--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule ZBVZeroBubble "
      "--parallelism.data_parallel_shard_degree 1";
  run(testing::mpirun(2) + kCli + job("pp_straight", pp));
  const std::string first = run(testing::mpirun(2, "-x TITAN_TEST_SIGTERM_AT_STEP=10 -x TITAN_TEST_SIGTERM_RANK=1 ") +
                                kCli + job("pp_stop", pp));
  EXPECT_NE(first.find("stopping after step 10"), std::string::npos) << first;
  run(testing::mpirun(2) + kCli + job("pp_stop", pp));
  expect_same_run("pp_straight", "pp_stop");
}

// Under context parallelism (CP 2, the ring with head-tail chunks, packed
// documents), SIGTERM reaching one cp rank saves both ranks' shards, and the
// resumed run (the data loader's cursor shared by the cp ranks) is bitwise
// the uninterrupted one.
TEST_F(Checkpoints, ContextParallelResumeAfterSigtermIsBitwiseExact) {
  fresh({"cp_straight", "cp_stop"});
  const std::string cp =
      "--parallelism.context_parallel_degree 2 --parallelism.context_parallel_rotate_method alltoall "
      "--parallelism.data_parallel_shard_degree 1 --model.document_masking true";
  run(testing::mpirun(2) + kCli + job("cp_straight", cp));
  const std::string first = run(testing::mpirun(2, "-x TITAN_TEST_SIGTERM_AT_STEP=10 -x TITAN_TEST_SIGTERM_RANK=1 ") +
                                kCli + job("cp_stop", cp));
  EXPECT_NE(first.find("stopping after step 10"), std::string::npos) << first;
  run(testing::mpirun(2) + kCli + job("cp_stop", cp));
  expect_same_run("cp_straight", "cp_stop");
}

// Save under FSDP 4; load in one process and under TP 2 x FSDP 2.
// (Whole weights read from FSDP 4's shards equal what FSDP's own all-gather
// exported: FsdpResumeIsBitwiseExact.)
TEST_F(Checkpoints, ReshardsBetweenMeshes) {
  // Resume FSDP 4's step 10 on other meshes and take one step (global batch 4 throughout).
  const std::vector<std::pair<std::string, std::string>> meshes{
      {"reshard_one", kCli + job("reshard_one", "--training.local_batch_size 4")},
      {"reshard_tp", testing::mpirun(4) + kCli +
                         job("reshard_tp",
                             "--parallelism.tensor_parallel_degree 2 "
                             "--parallelism.data_parallel_shard_degree 2 --training.local_batch_size 2")}};
  const double reference = metrics_column(workdir() / "fsdp_straight" / "metrics.jsonl", "loss").at(10);
  for (const auto& [name, command] : meshes) {
    fresh({name});
    fs::create_directories(workdir() / name / "checkpoint");
    fs::copy(step_folder("fsdp_straight", 10), step_folder(name, 10));
    const std::string output = run("TITAN_TEST_SIGTERM_AT_STEP=11 " + command);
    EXPECT_NE(output.find("(step 10,"), std::string::npos) << output;
    // Step 11's loss comes from the loaded weights on the same global batch;
    // only the order of f32 sums differs (per-rank means averaged, vocabulary
    // shards' log-sum-exp combined): ~1e-7 relative, bounded by 1e-5.
    const auto losses = metrics_column(workdir() / name / "metrics.jsonl", "loss");
    ASSERT_EQ(losses.size(), 1u) << name;
    EXPECT_NEAR(losses[0], reference, 1e-5 * reference) << name;
  }
  // After that step both meshes hold the same weights and moments up to that
  // rounding (each AdamW update is at most lr = 2e-3 x a bounded ratio).
  const auto one = load_whole(step_folder("reshard_one", 11));
  const auto tp = load_whole(step_folder("reshard_tp", 11));
  ASSERT_EQ(one.size(), tp.size());
  for (const auto& [name, tensor] : one) {
    ASSERT_TRUE(tp.count(name)) << name;
    EXPECT_LT(testing::relative_l2_error(tp.at(name), tensor), 1e-5) << name;
  }
}

// Copies `source`'s complete step folders into `name`'s (empty) checkpoint folder.
void copy_steps(const std::string& source, const std::string& name, const std::vector<int64_t>& steps) {
  fs::create_directories(workdir() / name / "checkpoint");
  for (int64_t step : steps) fs::copy(step_folder(source, step), step_folder(name, step), fs::copy_options::recursive);
}

std::vector<double> losses_of(const std::string& name) {
  return metrics_column(workdir() / name / "metrics.jsonl", "loss");
}

TEST_F(Checkpoints, LoadStepRollsBackAndRetrainsTheSameSteps) {
  fresh({"rollback"});
  copy_steps("straight", "rollback", {5, 10, 15, 20});
  const std::string output = run(kCli + job("rollback",
                                            "--checkpoint.interval 5 --checkpoint.load_step 10 "
                                            "--checkpoint.last_save_model_only false"));
  EXPECT_NE(output.find("(step 10,"), std::string::npos) << output;
  // Steps 15 and 20 are written again, over the copies, and equal the straight run's.
  const auto straight = losses_of("straight");
  EXPECT_EQ(losses_of("rollback"), std::vector<double>(straight.begin() + 10, straight.end()));
  EXPECT_EQ(file_text(fs::path(step_folder("rollback", 20)) / "rank-00000.safetensors"),
            file_text(fs::path(step_folder("straight", 20)) / "rank-00000.safetensors"));
  // A step that is not there is an error naming it.
  std::string missing;
  EXPECT_NE(testing::run_command(kCli + job("rollback", "--checkpoint.load_step 7"), workdir() / "last_command.log",
                                 &missing),
            0);
  EXPECT_NE(missing.find("checkpoint.load_step 7: no complete checkpoint step-000007"), std::string::npos) << missing;
}

TEST_F(Checkpoints, ExcludedOptimizerStartsFreshMomentsFromTheSameWeights) {
  fresh({"no_optimizer"});
  copy_steps("straight", "no_optimizer", {10});
  run("TITAN_TEST_SIGTERM_AT_STEP=12 " + kCli + job("no_optimizer", "--checkpoint.exclude_from_loading optimizer"));
  const auto losses = losses_of("no_optimizer");
  const auto straight = losses_of("straight");
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_EQ(losses[0], straight[10]);  // step 11: the same weights on the same batch
  EXPECT_NE(losses[1], straight[11]);  // step 12 follows an update from fresh AdamW moments
}

TEST_F(Checkpoints, SeedCheckpointAndInitialLoadPathStartFromTheSameWeights) {
  fresh({"seed", "from_seed", "from_initial"});
  // Weights from another seed, written once by one process as step 0.
  const std::string seeded = run(kCli + job("seed", "--checkpoint.create_seed_checkpoint --training.seed 7"));
  ASSERT_TRUE(checkpoint::is_complete_checkpoint(step_folder("seed", 0))) << seeded;
  const checkpoint::CheckpointMetadata metadata = checkpoint::parse_checkpoint_metadata(
      file_text(fs::path(step_folder("seed", 0)) / "metadata.json"), step_folder("seed", 0));
  for (const auto& [name, tensor] : metadata.tensors) EXPECT_TRUE(name.starts_with("model.")) << name;

  // A job whose checkpoint folder holds the seed resumes from it (under FSDP 2 here) ...
  copy_steps("seed", "from_seed", {0});
  run(testing::mpirun(2, "-x TITAN_TEST_SIGTERM_AT_STEP=2 ") + kCli +
      job("from_seed", "--parallelism.data_parallel_shard_degree 2 --training.local_batch_size 1"));
  // ... and one pointed at it by initial_load_path starts from the same weights in one process.
  run("TITAN_TEST_SIGTERM_AT_STEP=2 " + kCli +
      job("from_initial", "--checkpoint.initial_load_path " + step_folder("seed", 0)));
  const auto from_seed = losses_of("from_seed"), from_initial = losses_of("from_initial");
  ASSERT_EQ(from_seed.size(), 2u);
  ASSERT_EQ(from_initial.size(), 2u);
  // Same weights, same global batch: equal up to the order of f32 sums (FSDP 2 vs one process).
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(from_seed[i], from_initial[i], 1e-5 * from_initial[i]) << i;
  // Not the weights this job's own seed would have made.
  EXPECT_GT(std::abs(from_initial[0] - losses_of("straight")[0]), 1e-4);
}

// Converts the titan step folder `source` to HF as `tag`_hf, then starts one
// step from each with initial_load_path: the f32 conversion is exact, so both
// start from bitwise the same weights (and not from this job's own init).
void expect_hf_conversion_starts_the_same(const std::string& source, const std::string& tag) {
  const std::string hf = (workdir() / (tag + "_hf")).string(), from_hf = tag + "_from_hf",
                    from_titan = tag + "_from_titan";
  for (const std::string& folder : {tag + "_hf", from_hf, from_titan}) fs::remove_all(workdir() / folder);
  run(kCli + " convert --from titan " + source + " --to hf " + hf);
  run("TITAN_TEST_SIGTERM_AT_STEP=1 " + kCli + job(from_hf, "--checkpoint.initial_load_path " + hf));
  run("TITAN_TEST_SIGTERM_AT_STEP=1 " + kCli + job(from_titan, "--checkpoint.initial_load_path " + source));
  ASSERT_EQ(losses_of(from_hf).size(), 1u);
  EXPECT_EQ(losses_of(from_hf), losses_of(from_titan));
  EXPECT_NE(losses_of(from_hf)[0], losses_of("straight")[0]);
}

TEST_F(Checkpoints, InitialLoadPathTakesAHuggingFaceFolder) {
  expect_hf_conversion_starts_the_same(step_folder("straight", 20), "export");
}

// A job's model-only last save (the default) is a model export:
// initial_load_path takes that too (as a fine-tuning job starting from
// `make run`'s model does), with the weights of the checkpoint. The straight
// run's step 15, resumed to step 20, exports the weights its full step 20 holds.
TEST_F(Checkpoints, InitialLoadPathTakesAModelExport) {
  fresh({"export_source"});
  copy_steps("straight", "export_source", {15});
  run(kCli + job("export_source"));
  const fs::path exported = workdir() / "export_only";
  fs::remove_all(exported);
  fs::create_directories(exported);
  for (const char* file : {"job.toml", "model.safetensors", "tokenizer.json"})
    fs::copy_file(fs::path(step_folder("export_source", 20)) / file, exported / file);
  ASSERT_FALSE(fs::exists(exported / "metadata.json"));
  for (const std::string folder : {"from_export", "from_checkpoint"}) fs::remove_all(workdir() / folder);
  run("TITAN_TEST_SIGTERM_AT_STEP=1 " + kCli +
      job("from_export", "--checkpoint.initial_load_path " + exported.string()));
  run("TITAN_TEST_SIGTERM_AT_STEP=1 " + kCli +
      job("from_checkpoint", "--checkpoint.initial_load_path " + step_folder("straight", 20)));
  ASSERT_EQ(losses_of("from_export").size(), 1u);
  EXPECT_EQ(losses_of("from_export"), losses_of("from_checkpoint"));
  EXPECT_NE(losses_of("from_export")[0], losses_of("straight")[0]);
  // A tensor of another model is an error naming the file and the tensor.
  auto tensors = read_all_tensors(exported / "model.safetensors");
  checkpoint::NamedTensors renamed;
  for (auto& [name, tensor] : tensors) renamed.emplace_back(name == "norm.weight" ? "final_norm.weight" : name, tensor);
  checkpoint::write_safetensors((exported / "model.safetensors").string(), renamed);
  std::string output;
  EXPECT_NE(testing::run_command(kCli + job("bad_export", "--checkpoint.initial_load_path " + exported.string()),
                                 workdir() / "bad_export.log", &output),
            0);
  EXPECT_NE(output.find("model.safetensors: tensor 'final_norm.weight' is not in this job's model"), std::string::npos)
      << output;
}

TEST_F(Checkpoints, ConvertReadsATrainingCheckpointSavedByAnyMesh) {
  // FSDP 4's step 10 has no model export: convert gathers the weights from the four ranks' chunks.
  ASSERT_FALSE(fs::exists(fs::path(step_folder("fsdp_straight", 10)) / "model.safetensors"));
  expect_hf_conversion_starts_the_same(step_folder("fsdp_straight", 10), "fsdp_step");
}

// The most tensor bytes alive at once while `convert` runs, above what was alive before.
int64_t peak_tensor_bytes_of(const std::function<void()>& convert) {
  Allocator& cpu = allocator_for(DeviceType::cpu);
  const int64_t before = cpu.stats().live_bytes;
  cpu.reset_peak();
  convert();
  return cpu.stats().peak_bytes - before;
}

// `titan convert` streams: from a training checkpoint's chunks to HF, from HF
// to a titan export, and from that export to HF in bf16, each holds about one
// tensor at a time (read, rows put in HF's order, cast: under three copies of
// the largest), never the model; and the round trip is bitwise.
TEST_F(Checkpoints, ConvertHoldsOneTensorAtATimeNotTheModel) {
  const std::string source = step_folder("fsdp_straight", 10);
  const fs::path hf = workdir() / "streamed_hf", back = workdir() / "streamed_back",
                 again = workdir() / "streamed_again";
  for (const fs::path& folder : {hf, back, again}) fs::remove_all(folder);
  int64_t model_bytes = 0, largest = 0;
  const auto metadata =
      checkpoint::parse_checkpoint_metadata(file_text(fs::path(source) / checkpoint::kMetadataFile), "metadata.json");
  for (const auto& [name, tensor] : metadata.tensors) {
    if (!name.starts_with("model.")) continue;
    const int64_t bytes = shape_numel(tensor.shape) * static_cast<int64_t>(dtype_size(tensor.dtype));
    model_bytes += bytes;
    largest = std::max(largest, bytes);
  }
  // The bound below tells streaming from holding the model: the model is many times its largest tensor.
  ASSERT_LT(3 * largest, model_bytes / 2) << "model " << model_bytes << " bytes, largest tensor " << largest;
  train::ConvertOptions as_stored, to_bf16;
  to_bf16.dtype = DType::bf16;
  const int64_t from_checkpoint =
      peak_tensor_bytes_of([&] { train::convert_titan_to_hf(source, hf.string(), as_stored); });
  const int64_t from_hf =
      peak_tensor_bytes_of([&] { train::convert_hf_to_titan(hf.string(), back.string(), as_stored); });
  const int64_t from_export =
      peak_tensor_bytes_of([&] { train::convert_titan_to_hf(back.string(), again.string(), to_bf16); });
  std::printf(
      "model %lld bytes, largest tensor %lld; peak tensor bytes: checkpoint->hf %lld, hf->titan %lld, "
      "export->hf bf16 %lld\n",
      static_cast<long long>(model_bytes), static_cast<long long>(largest), static_cast<long long>(from_checkpoint),
      static_cast<long long>(from_hf), static_cast<long long>(from_export));
  for (const int64_t peak : {from_checkpoint, from_hf, from_export}) {
    EXPECT_GT(peak, 0);
    EXPECT_LE(peak, 3 * largest) << "model " << model_bytes << " bytes, largest tensor " << largest;
  }
  const auto first = read_all_tensors(hf / "model.safetensors"), last = read_all_tensors(again / "model.safetensors");
  ASSERT_EQ(first.size(), last.size());
  ASSERT_FALSE(first.empty());
  for (const auto& [name, tensor] : first) {
    ASSERT_TRUE(last.count(name)) << name;
    EXPECT_EQ(last.at(name).dtype(), DType::bf16) << name;
    EXPECT_EQ(last.at(name).to_floats(), tensor.to(DType::bf16).to_floats()) << name;
  }
}

}  // namespace checkpoint_test
}  // namespace titan
