// The second hostile-input probe's findings, each through the real `titan`
// CLI: a config path that is a folder, a TorchTitan TOML's unknown keys, an
// output path that cannot be used, a config error under mpirun, errors that
// quote raw bytes, a LoRA rank or a generation length past memory, a bad
// adapter_config.json, a resume after the validation split changed, and
// prepare's staging folder after a failure or SIGTERM. Each must end with
// one clear message naming the file or key, a non-zero exit, and nothing
// lost or left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "cli_job.h"

namespace titan {
namespace hostile_input_round2_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "hostile_input_round2_test";
  return dir;
}

using Result = testing::CommandResult;
using testing::expect_user_error;

Result run(const std::string& command, const std::string& name) {
  return testing::run_to_completion(command, workdir() / (name + ".log"));
}

size_t count(const std::string& text, const std::string& fragment) {
  size_t n = 0;
  for (size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) ++n;
  return n;
}

class HostileInputRound2 : public ::testing::Test {
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

TEST_F(HostileInputRound2, AConfigPathThatIsNotAReadableFileIsAnError) {
  expect_user_error(run(kCli + " train --config /tmp --print-config", "config_folder"),
                    {"config file '/tmp' is a folder, not a file"});
  expect_user_error(run(kCli + " train --config /dev/null --print-config", "config_device"),
                    {"config file '/dev/null' is a special file"});
  expect_user_error(run(kCli + " train --config /no/such/job.toml --print-config", "config_missing"),
                    {"/no/such/job.toml", "no such file"});
}

// A config written for TorchTitan loads (its keys are titan's or handled:
// docs/torchtitan-keys.md), but keys neither has are all reported in one
// error, each with its line, not one per rerun.
TEST_F(HostileInputRound2, EveryUnknownKeyOfAFileIsReportedAtOnce) {
  const fs::path toml = workdir() / "torchtitan.toml";
  std::ofstream(toml) << "[job]\ndump_folder = \"./outputs\"\n"
                         "[compile]\nenable = false\n"
                         "[training]\nsteps = 3\ndataset = \"c4\"\nenable_cpu_offload = false\nstesp = 2\n"
                         "[model]\nconverters = []\n"
                         "[quantize.linear.float8]\nenable = false\n"
                         "[compiler]\nenable = true\n";
  const Result result = run(kCli + " train --config " + toml.string() + " --print-config", "unknown_keys");
  expect_user_error(result, {"3 unknown or misplaced items", toml.string() + ":9: unknown key [training] stesp",
                             toml.string() + ":13: unknown key quantize.linear.float8.enable",
                             toml.string() + ":14: unknown section [compiler]"});
  EXPECT_EQ(result.output.find("enable_cpu_offload"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("converters"), std::string::npos) << result.output;
}

TEST_F(HostileInputRound2, UnusableOutputPathsFailAtStartUpBeforeAnyStep) {
  const fs::path dump = workdir() / "outputs_in_the_way";
  fs::remove_all(dump);
  fs::create_directories(dump);
  std::ofstream(dump / "a_file") << "not a folder";
  const auto start = Clock::now();
  const Result file_as_folder = run(job(dump, "--training.steps 2 --checkpoint.folder a_file"), "file_as_folder");
  expect_user_error(file_as_folder, {"checkpoint.folder", (dump / "a_file").string(), "is a file, not a folder"});
  EXPECT_EQ(file_as_folder.output.find("step "), std::string::npos) << file_as_folder.output;
  EXPECT_EQ(testing::file_text(dump / "a_file"), "not a folder");
  // metrics.jsonl that is a folder: an error at start (a write failure later only warns).
  fs::create_directories(dump / "metrics.jsonl");
  const Result metrics_folder = run(job(dump, "--training.steps 2"), "metrics_folder");
  expect_user_error(metrics_folder, {"metrics file", (dump / "metrics.jsonl").string(), "Is a directory"});
  EXPECT_EQ(metrics_folder.output.find("step "), std::string::npos) << metrics_folder.output;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(60));
  expect_user_error(run(job(workdir() / "keep", "--checkpoint.keep_latest_k -3"), "keep_negative"),
                    {"checkpoint.keep_latest_k must be >= 0", "-3"});
}

// A config error under mpirun: every rank meets it, so the job ends with the
// error once, without MPI_Abort's banner and without flight recorder dumps:
// one meets it while parsing the config, one after the ranks have joined.
TEST_F(HostileInputRound2, AConfigErrorUnderMpirunEndsEveryRankWithOneMessage) {
  for (const auto& [name, extra, message] :
       {std::tuple<std::string, std::string, std::string>{"mpi_unknown_key", "--training.stesp 3",
                                                          "unknown key 'stesp' in [training]"},
        {"mpi_missing_data", "--training.dataset_path " + (workdir() / "no_such_data").string(), "no_such_data"}}) {
    SCOPED_TRACE(name);
    const Result result = run(testing::mpirun(2) + job(workdir() / name, "--training.steps 2 " + extra), name);
    EXPECT_NE(result.status, 0) << result.output;
    EXPECT_EQ(count(result.output, message), 1u) << result.output;
    EXPECT_EQ(count(result.output, "titan: error:"), 1u) << result.output;
    EXPECT_EQ(result.output.find("MPI_ABORT"), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("flight recorder"), std::string::npos) << result.output;
    const fs::path traces = workdir() / name / "comm_traces";
    EXPECT_TRUE(!fs::exists(traces) || fs::is_empty(traces)) << "a flight recorder dump was written";
  }
}

// An error quoting a file's content prints it whole and harmless: raw control
// bytes (here a NUL in a vocabulary key) become \xHH and the text goes on.
TEST_F(HostileInputRound2, ErrorsEscapeTheBytesTheyQuote) {
  const fs::path file = workdir() / "control_bytes_tokenizer.json";
  std::ofstream(file) << R"({"model": {"type": "BPE", "vocab": {"\u0000\u001b[31mred": 0}, "merges": []}})";
  const Result result = run(kCli + " tokenizer info --tokenizer " + file.string(), "control_bytes");
  expect_user_error(result, {R"(model.vocab["\x00\x1b[31mred"])", "is not written in the byte-level alphabet"});
  EXPECT_EQ(result.output.find('\x1b'), std::string::npos) << "an escape sequence reached the terminal";
}

// LoRA adapters (and their gradients and AdamW moments) are in the memory
// estimate: an absurd rank is refused at once, naming the adapters, not after
// the host ran out. Every job says how close it is to the machine's memory.
TEST_F(HostileInputRound2, ALoraRankPastMemoryIsRefusedAtOnce) {
  const auto start = Clock::now();
  const Result result =
      run(job(workdir() / "lora_huge", "--training.steps 2 --lora.enable true --lora.rank 1000000"), "lora_huge");
  expect_user_error(result, {"GiB per rank", "LoRA", "adapter parameters", "lora.rank"});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  const Result small =
      run(job(workdir() / "lora_small", "--training.steps 1 --lora.enable true --lora.rank 4"), "lora_small");
  EXPECT_EQ(small.status, 0) << small.output;
  EXPECT_TRUE(std::regex_search(small.output, std::regex("memory: this job needs about [0-9.]+ GiB per rank of "
                                                         "[0-9.]+ GiB available \\([0-9]+%")))
      << small.output;
}

TEST_F(HostileInputRound2, AGenerationLongerThanMemoryIsRefusedNamingTheFlag) {
  const fs::path dump = workdir() / "generate_job";
  if (!fs::exists(dump / "checkpoint" / "step-000001")) {
    ASSERT_EQ(run(job(dump, "--training.steps 1"), "generate_job").status, 0);
  }
  const auto start = Clock::now();
  const Result result = run(kCli + " generate --checkpoint " + (dump / "checkpoint" / "step-000001").string() +
                                " --prompt 'The' --max-new-tokens 100000000000",
                            "generate_huge");
  expect_user_error(result, {"KV cache of 10000000000", "--max-new-tokens"});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST_F(HostileInputRound2, ABadAdapterConfigNamesTheKeyNotTheJsonLibrary) {
  const fs::path dump = workdir() / "adapter_job";
  if (!fs::exists(dump / "checkpoint" / "step-000001")) {
    ASSERT_EQ(run(job(dump, "--training.steps 1"), "adapter_job").status, 0);
  }
  for (const auto& [config, fragment] : std::vector<std::pair<std::string, std::string>>{
           {R"({"r": "eight", "lora_alpha": 16})", R"('r' must be an integer, got "eight")"},
           {R"({"r": 8})", "required key 'lora_alpha' is missing"},
           {R"({"r": 8, "lora_alpha": 16, "use_dora": "yes"})", R"('use_dora' must be true or false, got "yes")"},
           {R"({"r": 8, "lora_alpha": 16, "target_modules": [1]})", "target_modules holds 1"},
           {R"([8])", "expected a JSON object"}}) {
    SCOPED_TRACE(config);
    fs::remove_all(workdir() / "adapter");
    fs::create_directories(workdir() / "adapter");
    std::ofstream(workdir() / "adapter" / "adapter_config.json") << config;
    const Result result =
        run(kCli + " convert --from titan " + (dump / "checkpoint" / "step-000001").string() + " --to hf " +
                (workdir() / "merged").string() + " --force --merge-lora " + (workdir() / "adapter").string(),
            "bad_adapter");
    expect_user_error(result, {(workdir() / "adapter" / "adapter_config.json").string(), fragment});
    EXPECT_EQ(result.output.find("json.exception"), std::string::npos) << result.output;
  }
}

TEST_F(HostileInputRound2, AResumeAfterTheValidationSplitChangedNamesTheKey) {
  const fs::path dump = workdir() / "split";
  fs::remove_all(dump);
  const std::string common =
      "--checkpoint.enable true --checkpoint.interval 2 --checkpoint.last_save_model_only false "
      "--validation.enable true --validation.freq 100 ";
  ASSERT_EQ(run(testing::tiny_train_command(workdir() / "data", workdir() / "config.json", dump,
                                            common + "--training.steps 2 --validation.split 0.05"),
                "split_first")
                .status,
            0);
  const Result resumed = run(testing::tiny_train_command(workdir() / "data", workdir() / "config.json", dump,
                                                         common + "--training.steps 4 --validation.split 0.3"),
                             "split_second");
  expect_user_error(resumed, {"validation.split", "validation documents", "exclude_from_loading"});
}

// Prepare removes the staging folder it abandons, whether a write fails or a
// SIGTERM stops it; the previous dataset stays whole. The signals land in
// every phase of the ~0.7 s run: reading, tokenizer training, and the writes
// of the tokenizer, shards and manifest (where a writer once raced the
// cleanup and brought the folder back).
TEST_F(HostileInputRound2, PrepareLeavesNoStagingFolderAfterAFailureOrASignal) {
  const fs::path output = workdir() / "staged";
  const std::string prepare = kCli + " data prepare --input /usr/share/games/fortunes --format fortune " +
                              "--train-tokenizer 2048 --output " + output.string();
  // A late signal may let an earlier run finish and publish the dataset.
  fs::remove_all(output);
  // A file size limit fails the shard write (EFBIG, as a full disk would).
  const Result failed = run("bash -c \"trap '' XFSZ; ulimit -f 64; exec " + prepare + "\"", "staged_full");
  EXPECT_NE(failed.status, 0) << failed.output;
  EXPECT_FALSE(fs::exists(output.string() + ".partial")) << failed.output;
  EXPECT_FALSE(fs::exists(output));
  for (int delay_ms : {150, 300, 450, 550, 650}) {
    SCOPED_TRACE(delay_ms);
    const pid_t pid = testing::start_command(prepare, workdir() / "staged_term.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGTERM);
    const int status = testing::wait_command(pid);
    const bool finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    EXPECT_TRUE(finished || (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)) << status;
    EXPECT_FALSE(fs::exists(output.string() + ".partial"));
  }
}

}  // namespace hostile_input_round2_test
}  // namespace titan
