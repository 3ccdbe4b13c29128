// Multi-tier checkpoints end to end (docs/checkpoints.md "Multi-tier
// checkpoints"): 4 ranks as 2 "nodes" (tests/scripts/as_node.sh), every rank
// killed with SIGKILL after step 13 (persistent checkpoint at 10, fast tier at
// 10 and 12). The restart must resume from the fast tier, from the peer replica
// once node1's fast tier is gone, from the persistent checkpoint once both
// are, and skip a corrupt fast-tier file named in a warning; each time the
// losses and the final state (model and AdamW moments) bitwise equal to an
// uninterrupted run's. Plus the restart choice as a pure function.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cli_job.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/train/checkpointer.h"

namespace titan {
namespace multi_tier_checkpoint_test {

namespace fs = std::filesystem;
using testing::file_text;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& tier_workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "multi_tier_checkpoint_test";
  return dir;
}

// Each job's fast tier, in host memory as a user's would be; removed by the tests.
fs::path local_folder(const std::string& name) { return fs::path("/dev/shm") / ("titan-test-tiers-" + name); }

// 20 steps of llama3 debugmodel under FSDP 4 on 2 nodes of 2 ranks, f32, a
// persistent checkpoint every 10 steps, the fast tier every 2, the last save the full state.
std::string tier_job(const std::string& name, const std::string& mpirun_extra = "") {
  return fmt::format(
      "{} {}/tests/scripts/as_node.sh 2 {} train --config {}/configs/llama3_debug.toml --job.dump_folder {} "
      "--training.dataset_path {} --model.tokenizer_path {}/tokenizer.json --training.steps 20 --training.seq_len 32 "
      "--training.local_batch_size 1 --parallelism.data_parallel_shard_degree 4 --training.mixed_precision_param f32 "
      "--model.document_masking false --validation.enable false --lr_scheduler.warmup_steps 3 "
      "--metrics.peak_tflops 1 --metrics.progress false --checkpoint.enable true --checkpoint.interval 10 "
      "--checkpoint.last_save_model_only false --checkpoint.local_interval 2 --checkpoint.local_folder {}",
      testing::mpirun(4, "--mca btl tcp,self " + mpirun_extra), TITAN_SOURCE_DIR, kCli, TITAN_SOURCE_DIR,
      (tier_workdir() / name).string(), (tier_workdir() / "data").string(), (tier_workdir() / "data").string(),
      local_folder(name).string());
}

// The last loss logged for each step (a killed run's steps after its restart point are logged twice).
std::map<int64_t, double> losses_by_step(const std::string& name) {
  std::map<int64_t, double> losses;
  std::ifstream in(tier_workdir() / name / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("step")) losses[record["step"].get<int64_t>()] = record["loss"].get<double>();
  }
  return losses;
}

// Every tensor (model and optimizer) of job `name`'s step-20 checkpoint, whole.
std::map<std::string, std::vector<float>> final_state(const std::string& name) {
  const fs::path folder = tier_workdir() / name / "checkpoint" / checkpoint::step_folder_name(20);
  const checkpoint::CheckpointMetadata metadata =
      checkpoint::parse_checkpoint_metadata(file_text(folder / "metadata.json"), folder.string());
  std::vector<train::StateTensor> tensors;
  for (const auto& [tensor_name, tensor] : metadata.tensors) {
    train::StateTensor t;
    t.name = tensor_name;
    t.part = tensor_name.substr(0, tensor_name.find('.'));
    t.tensor = Tensor::empty(tensor.shape, tensor.dtype);
    t.global_shape = tensor.shape;
    t.offsets.assign(tensor.shape.size(), 0);
    tensors.push_back(t);
  }
  train::Checkpointer::load(folder.string(), tensors, {"model", "optimizer"});
  std::map<std::string, std::vector<float>> values;
  for (const train::StateTensor& t : tensors) values[t.name] = t.tensor.to_floats();
  return values;
}

class MultiTierCheckpoints : public ::testing::Test {
 protected:
  // The uninterrupted reference and one run killed after step 13, shared by
  // the tests (CTest runs each in its own process; redone when titan changed).
  static void SetUpTestSuite() {
    const std::string stamp = fmt::format("{} {}", fs::last_write_time(kCli).time_since_epoch().count(),
                                          fs::last_write_time("/proc/self/exe").time_since_epoch().count());
    if (file_text(tier_workdir() / "stamp") == stamp) return;
    fs::remove_all(tier_workdir());
    fs::create_directories(tier_workdir());
    testing::prepare_test_corpus(tier_workdir() / "data", tier_workdir() / "prepare.log");
    for (const char* name : {"straight", "killed"}) fs::remove_all(local_folder(name));
    testing::run_ok(tier_job("straight"), tier_workdir() / "straight.log");
    fs::remove_all(local_folder("straight"));
    // Every rank raises SIGKILL on itself after step 13 (once the fast tier's write of step 12 landed).
    const testing::CommandResult killed = testing::run_to_completion(
        tier_job("killed", "-x TITAN_TEST_SIGKILL_AFTER_STEP=13"), tier_workdir() / "killed.log");
    ASSERT_NE(killed.status, 0) << killed.output;
    // Kept on disk between the tests (each copies it back into /dev/shm), so no test leaves memory behind.
    fs::copy(local_folder("killed"), tier_workdir() / "killed_fast_tier", fs::copy_options::recursive);
    fs::remove_all(local_folder("killed"));
    std::ofstream(tier_workdir() / "stamp") << stamp;
  }

  // A copy of the killed job (dump folder and fast tier) as test `name`'s own.
  static void copy_killed(const std::string& name) {
    fs::remove_all(tier_workdir() / name);
    fs::remove_all(local_folder(name));
    fs::copy(tier_workdir() / "killed", tier_workdir() / name, fs::copy_options::recursive);
    fs::copy(tier_workdir() / "killed_fast_tier", local_folder(name), fs::copy_options::recursive);
  }

  // Resumes test `name`'s copy; expects `fragment` in the output and the uninterrupted run's losses and state.
  static std::string resume_and_compare(const std::string& name, const std::string& fragment) {
    const std::string output = testing::run_ok(tier_job(name), tier_workdir() / (name + ".log"));
    EXPECT_NE(output.find(fragment), std::string::npos) << output;
    const auto losses = losses_by_step(name);
    EXPECT_EQ(losses.size(), 20u);
    EXPECT_EQ(losses, losses_by_step("straight"));
    const auto state = final_state(name);
    const auto reference = final_state("straight");
    EXPECT_EQ(state.size(), reference.size());
    for (const auto& [tensor, values] : reference) {
      const auto found = state.find(tensor);
      EXPECT_TRUE(found != state.end()) << tensor;
      if (found != state.end()) {
        EXPECT_EQ(found->second, values) << tensor;
      }
    }
    fs::remove_all(local_folder(name));
    return output;
  }

  void TearDown() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(local_folder(name));
  }
};

TEST_F(MultiTierCheckpoints, KilledJobResumesFromTheFastTierBitwise) {
  copy_killed("KilledJobResumesFromTheFastTierBitwise");
  const std::string output =
      resume_and_compare("KilledJobResumesFromTheFastTierBitwise", "titan: resumed at step 12 from the fast tier");
  // The goodput record names the tier, and the steps after 12 the killed run had done count as lost.
  const std::string metrics = file_text(tier_workdir() / "KilledJobResumesFromTheFastTierBitwise" / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"restart_tier\":\"fast\""), std::string::npos);
  EXPECT_NE(metrics.find("\"lost_to_restart_steps\":1"), std::string::npos);
  EXPECT_NE(output.find("resumed from the fast tier in"), std::string::npos) << output;
}

TEST_F(MultiTierCheckpoints, WithoutNode1sFastTierResumesFromThePeerReplica) {
  const std::string name = "WithoutNode1sFastTierResumesFromThePeerReplica";
  copy_killed(name);
  fs::remove_all(local_folder(name) / "node1");
  resume_and_compare(name, "titan: resumed at step 12 from the peer replica for rank(s) 2,3");
}

TEST_F(MultiTierCheckpoints, WithoutAnyFastTierResumesFromThePersistentCheckpoint) {
  const std::string name = "WithoutAnyFastTierResumesFromThePersistentCheckpoint";
  copy_killed(name);
  fs::remove_all(local_folder(name) / "node0");
  fs::remove_all(local_folder(name) / "node1");
  resume_and_compare(name, "titan: resumed at step 10 from the persistent checkpoint");
}

TEST_F(MultiTierCheckpoints, ACorruptFastTierFileIsNamedAndSkipped) {
  const std::string name = "ACorruptFastTierFileIsNamedAndSkipped";
  copy_killed(name);
  // One flipped byte in rank 0's newest fast-tier tensors: its copy on node1 still holds step 12.
  const fs::path file = local_folder(name) / "node0" / "rank-00000" / checkpoint::step_folder_name(12) / "tensors.bin";
  ASSERT_TRUE(fs::exists(file));
  {
    std::fstream bytes(file, std::ios::in | std::ios::out | std::ios::binary);
    bytes.seekg(100);
    const char c = static_cast<char>(bytes.get());
    bytes.seekp(100);
    bytes.put(static_cast<char>(c ^ 0x5a));
  }
  const std::string output = resume_and_compare(name, "titan: resumed at step 12 from the peer replica for rank(s) 0");
  EXPECT_NE(output.find(file.string() + " does not match its CRC32C"), std::string::npos) << output;
}

// Bad fast-tier keys end the job before it starts (exit 1), naming the key.
TEST(MultiTierKeys, BadValuesAreRefusedNamingTheKey) {
  const fs::path dump = fs::path(::testing::TempDir()) / "multi_tier_keys";
  const std::string base = fmt::format("{} train --config {}/configs/llama3_debug.toml --job.dump_folder {} ", kCli,
                                       TITAN_SOURCE_DIR, dump.string());
  const auto run = [&](const std::string& extra) {
    return testing::run_to_completion(base + extra, fs::path(::testing::TempDir()) / "multi_tier_keys.log");
  };
  testing::expect_user_error(run("--checkpoint.enable true --checkpoint.local_interval -1"),
                             {"checkpoint.local_interval must be >= 0"});
  testing::expect_user_error(run("--checkpoint.enable true --checkpoint.local_interval 5 "
                                 "--checkpoint.local_keep_latest_k 0"),
                             {"checkpoint.local_keep_latest_k must be >= 1"});
  testing::expect_user_error(run("--checkpoint.enable false --checkpoint.local_interval 5"),
                             {"checkpoint.local_interval = 5 needs checkpoint.enable = true"});
  testing::expect_user_error(
      run("--checkpoint.enable true --checkpoint.local_interval 5 --checkpoint.local_folder " + dump.string()),
      {"checkpoint.local_folder must not be the dump folder"});
  fs::remove_all(dump);
}

}  // namespace multi_tier_checkpoint_test
}  // namespace titan
