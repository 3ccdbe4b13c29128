// What an adversarial user found, each case through the real `titan` CLI:
// two jobs on one dump folder, a prepared dataset without its manifest or with
// another tokenizer, a job far too large for the machine, `convert --force`
// over its own input, a full disk under the metrics file and under a
// checkpoint, a hand-edited step in a checkpoint, a dump folder that cannot
// be created. Nothing may be lost or corrupted, every error names the file,
// key or holder, and user errors are not labelled internal.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli_job.h"
#include "titan/checkpoint/checkpoint_folder.h"

namespace titan {
namespace hostile_input_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "hostile_input_test";
  return dir;
}

using Result = testing::CommandResult;
using testing::expect_user_error;

Result run(const std::string& command, const std::string& name) {
  return testing::run_to_completion(command, workdir() / (name + ".log"));
}

class HostileInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
    testing::write_tiny_llama_config(workdir());
  }
  static std::string job(const fs::path& dump, const std::string& extra) {
    return testing::tiny_train_command(workdir() / "data", workdir() / "config.json", dump,
                                       "--validation.enable false " + extra);
  }
};

TEST_F(HostileInput, ASecondJobOnADumpFolderIsRefusedNamingTheHolder) {
  const fs::path dump = workdir() / "shared_dump";
  fs::remove_all(dump);
  const pid_t first = testing::start_command(job(dump, "--training.steps 100000"), workdir() / "first.log");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (testing::file_text(dump / "metrics.jsonl").empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const Result second = run(job(dump, "--training.steps 5 --checkpoint.enable true"), "second");
  expect_user_error(second, {"in use by another titan job", "pid " + std::to_string(first), dump.string()});
  // The refused job wrote nothing: no checkpoint appeared in the holder's folder.
  EXPECT_FALSE(fs::exists(dump / "checkpoint" / checkpoint::step_folder_name(5)));
  // The holder dies without any cleanup: its lock goes with it, and the next
  // job takes the folder over, saying whose stale lock it found.
  kill(first, SIGKILL);
  testing::wait_command(first);
  const Result third = run(job(dump, "--training.steps 2"), "third");
  EXPECT_EQ(third.status, 0) << third.output;
  EXPECT_NE(third.output.find("last locked by a job that has ended (pid " + std::to_string(first)), std::string::npos)
      << third.output;
  // A job that ended normally leaves no stale holder behind.
  const Result fourth = run(job(dump, "--training.steps 2"), "fourth");
  EXPECT_EQ(fourth.status, 0) << fourth.output;
  EXPECT_EQ(fourth.output.find("last locked"), std::string::npos) << fourth.output;
}

TEST_F(HostileInput, APreparedFolderWithoutItsManifestIsNeverTrainedOnAsText) {
  const fs::path data = workdir() / "no_manifest";
  fs::remove_all(data);
  fs::copy(workdir() / "data", data);
  fs::remove(data / "manifest.json");
  expect_user_error(run(testing::tiny_train_command(data, workdir() / "config.json", workdir() / "no_manifest_job",
                                                    "--training.steps 2"),
                        "no_manifest"),
                    {data.string(), "token shards", "no manifest.json"});
}

TEST_F(HostileInput, ShardsOfAnotherTokenizerWithTheSameVocabularySizeAreRefused) {
  // A second 512-token BPE trained on other text: same size, other tokens.
  const fs::path other = workdir() / "other_tokenizer";
  fs::remove_all(other);
  const Result trained = run(kCli +
                                 " data prepare --input /usr/share/games/fortunes/love --format fortune "
                                 "--train-tokenizer 512 --output " +
                                 other.string(),
                             "other_prepare");
  ASSERT_EQ(trained.status, 0) << trained.output;
  expect_user_error(run(testing::tiny_train_command(workdir() / "data", workdir() / "config.json",
                                                    workdir() / "other_job", "--training.steps 2") +
                            " --model.tokenizer_path " + (other / "tokenizer.json").string(),
                        "other_job"),
                    {"manifest.json", "the shards were made with tokenizer", "fingerprint"});
}

// A prepare killed at any moment leaves the previous dataset whole (or the
// new one whole), never a mix, and never a folder the loader would misread.
TEST_F(HostileInput, AKilledPrepareLeavesTheOldDatasetWhole) {
  const fs::path output = workdir() / "replaced";
  fs::remove_all(output);
  const std::string prepare = kCli + " data prepare --input /usr/share/games/fortunes --format fortune " +
                              "--train-tokenizer 1024 --output " + output.string();
  ASSERT_EQ(run(prepare, "replaced_first").status, 0);
  const std::string before = testing::file_text(output / "manifest.json");
  for (int delay_ms : {20, 60, 120, 200, 300}) {
    SCOPED_TRACE(delay_ms);
    const pid_t pid = testing::start_command(prepare, workdir() / "replaced.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    testing::wait_command(pid);
    ASSERT_TRUE(fs::exists(output / "manifest.json")) << "the dataset is gone after a kill at " << delay_ms << " ms";
    EXPECT_EQ(testing::file_text(output / "manifest.json"), before);
    const Result load =
        run(kCli + " tokenizer info --tokenizer " + (output / "tokenizer.json").string(), "replaced_info");
    EXPECT_EQ(load.status, 0) << load.output;
  }
  // And the next prepare over it succeeds (what a kill left behind is cleared).
  EXPECT_EQ(run(prepare, "replaced_last").status, 0);
  // A folder holding other files is never replaced.
  fs::create_directories(workdir() / "users_folder");
  std::ofstream(workdir() / "users_folder" / "notes.txt") << "mine";
  expect_user_error(run(kCli +
                            " data prepare --input /usr/share/games/fortunes/love --format fortune "
                            "--train-tokenizer 300 --output " +
                            (workdir() / "users_folder").string(),
                        "users_folder"),
                    {"holds 'notes.txt'", "choose a new or empty one"});
  EXPECT_EQ(testing::file_text(workdir() / "users_folder" / "notes.txt"), "mine");
}

TEST_F(HostileInput, AJobTooLargeForTheMachineIsRefusedAtOnceWithTheNumbers) {
  const auto start = Clock::now();
  const Result result = run(job(workdir() / "too_large", "--training.steps 2") + " --model.hf_config '' " +
                                "--model.name llama3 --model.flavor 70B --model.vocab_size 0",
                            "too_large");
  expect_user_error(result, {"GiB per rank", "parameters", "MemAvailable", "data_parallel_shard_degree",
                             "activation_checkpoint.mode", "titan estimate-memory"});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(60));
  const Result absurd = run(job(workdir() / "absurd", "--training.steps 2 --training.seq_len 1000000000"), "absurd");
  expect_user_error(absurd, {"training.seq_len", "tokens per micro-batch"});
  // With the check off, an allocation that fails (here under a 4 GB address
  // space limit) ends the job at once with a clear error, not a hang or a crash.
  const auto unchecked = Clock::now();
  expect_user_error(
      run("bash -c \"ulimit -v 4000000; exec " + job(workdir() / "unchecked", "--training.steps 2") +
              " --model.hf_config '' --model.name llama3 --model.flavor 8B --training.memory_check false\"",
          "unchecked"),
      {"out of host memory allocating", "titan estimate-memory"});
  EXPECT_LT(Clock::now() - unchecked, std::chrono::seconds(60));
}

TEST_F(HostileInput, ConvertForceNeverReplacesItsOwnSource) {
  const fs::path root = workdir() / "convert";
  fs::remove_all(root);
  ASSERT_EQ(run(job(root / "job", "--training.steps 2"), "convert_job").status, 0);
  const fs::path source = root / "job" / "checkpoint" / checkpoint::step_folder_name(2);
  const std::string weights = testing::file_text(source / "model.safetensors");
  ASSERT_FALSE(weights.empty());
  for (const std::string& output :
       {root.string(), source.string(), (source / "inner").string(), source.string() + "/"}) {
    expect_user_error(
        run(kCli + " convert --from titan " + source.string() + " --to hf " + output + " --force", "convert"),
        {"--to", "source"});
    EXPECT_EQ(testing::file_text(source / "model.safetensors"), weights) << output;
  }
}

TEST_F(HostileInput, AFullDiskUnderTheMetricsFileWarnsOnceOrStops) {
  const fs::path dump = workdir() / "metrics_full";
  fs::remove_all(dump);
  fs::create_directories(dump);
  fs::create_symlink("/dev/full", dump / "metrics.jsonl");  // every write: ENOSPC
  const Result warned = run(job(dump, "--training.steps 3 --metrics.log_freq 1"), "metrics_full");
  EXPECT_EQ(warned.status, 0) << warned.output;
  const std::string warning =
      "warning: cannot write metrics to '" + (dump / "metrics.jsonl").string() + "': No space left on device";
  ASSERT_NE(warned.output.find(warning), std::string::npos) << warned.output;
  EXPECT_EQ(warned.output.find(warning), warned.output.rfind(warning)) << "warned more than once:\n" << warned.output;
  EXPECT_NE(warned.output.find("step     3/3"), std::string::npos) << warned.output;
  expect_user_error(run(job(dump, "--training.steps 3 --metrics.stop_on_write_error true"), "metrics_stop"),
                    {"cannot write metrics to", "No space left on device", "metrics.stop_on_write_error"});
}

// A file size limit makes every write past 1 MiB fail (EFBIG) the way a full
// disk does (ENOSPC), so the save of a several-MB checkpoint fails midway.
TEST_F(HostileInput, AFailedSaveNamesThePathAndReasonAndLeavesNoPartialFolder) {
  const fs::path dump = workdir() / "save_full";
  fs::remove_all(dump);
  const Result result =
      run("bash -c \"trap '' XFSZ; ulimit -f 1024; exec " +
              job(dump, "--training.steps 2 --checkpoint.enable true --checkpoint.last_save_model_only false") + "\"",
          "save_full");
  expect_user_error(result, {(dump / "checkpoint").string(), "File too large"});
  for (const auto& entry : fs::directory_iterator(dump / "checkpoint")) {
    EXPECT_EQ(entry.path().string().find(".partial"), std::string::npos) << entry.path();
  }
  // The model export (the default last save) fails the same way, naming its file and the reason.
  const Result exported =
      run("bash -c \"trap '' XFSZ; ulimit -f 1024; exec " + job(workdir() / "export_full", "--training.steps 1") + "\"",
          "export_full");
  expect_user_error(exported, {"model.safetensors", "File too large"});
}

TEST_F(HostileInput, AHandEditedStepInACheckpointIsRefused) {
  const fs::path dump = workdir() / "edited";
  fs::remove_all(dump);
  ASSERT_EQ(run(job(dump,
                    "--training.steps 4 --checkpoint.enable true --checkpoint.interval 2 "
                    "--checkpoint.last_save_model_only false"),
                "edited")
                .status,
            0);
  const fs::path metadata = dump / "checkpoint" / checkpoint::step_folder_name(4) / "metadata.json";
  std::string text = testing::file_text(metadata);
  const std::string top_level_step = "\n \"step\": 4";  // metadata.json is indented by one space per level
  const size_t at = text.find(top_level_step);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, top_level_step.size(), "\n \"step\": 2");
  std::ofstream(metadata, std::ios::trunc) << text;
  expect_user_error(run(job(dump, "--training.steps 6 --checkpoint.enable true --checkpoint.interval 2"), "edited2"),
                    {metadata.string(), "\"step\" is 2 but the folder is named for step 4"});
}

TEST_F(HostileInput, ADumpFolderThatCannotBeCreatedIsAUserError) {
  expect_user_error(run(job("/dev/null/outputs", "--training.steps 1"), "unwritable"),
                    {"job.dump_folder '/dev/null/outputs'", "cannot create it"});
}

}  // namespace hostile_input_test
}  // namespace titan
