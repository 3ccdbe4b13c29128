// SIGTERM and SIGINT from outside, at moments nobody chose: a training job
// must always finish its step, save and exit 0, whatever it was doing when the
// signal came (forward, backward, the optimizer, data loading, a checkpoint
// write, validation). Before the signals went to a thread of their own, a
// signal landing in oneDNN's JIT GEMM corrupted the heap in about one run in
// twenty (train/preemption.h); glibc's heap checks (MALLOC_CHECK_=3) and the
// AddressSanitizer run of this suite make such corruption end the run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "cli_job.h"
#include "titan/checkpoint/checkpoint_folder.h"

namespace titan {
namespace signal_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "signal_test";
  return dir;
}

class Signals : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
    testing::write_tiny_llama_config(workdir());
  }

  // A small model that trains in milliseconds a step (cli_job.h), with
  // checkpoints every 4 steps (async in every other run) and validation every
  // 3: far more steps than any run gets to, so the signal always ends it.
  static std::string job(const fs::path& folder, bool async, const std::string& extra = "") {
    return "env MALLOC_CHECK_=3 " +
           testing::tiny_train_command(
               workdir() / "data", workdir() / "config.json", folder,
               fmt::format("--training.steps 100000 --validation.freq 3 --validation.steps 1 --checkpoint.enable true "
                           "--checkpoint.interval 4 --checkpoint.keep_latest_k 2 --checkpoint.async_mode {} {}",
                           async ? "async" : "disabled", extra));
  }

  // Starts a job and waits for its first logged step (training is under way);
  // -1 (the job's output in a test failure) when it ends or stalls before that.
  static pid_t start_training(const fs::path& folder, bool async, const fs::path& log) {
    fs::remove_all(folder);
    const pid_t pid = testing::start_command(job(folder, async), log);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    int status = 0;
    while (testing::file_text(folder / "metrics.jsonl").empty()) {
      if (waitpid(pid, &status, WNOHANG) != 0 || Clock::now() > deadline) {
        kill(pid, SIGKILL);
        ADD_FAILURE() << "the job did not start training:\n" << testing::file_text(log);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pid;
  }

  // The run ended by itself with exit 0, said it stopped on a signal after a
  // step, and that step's checkpoint is complete.
  static void expect_saved_and_exited_zero(const fs::path& folder, int status, const fs::path& log) {
    const std::string output = testing::file_text(log);
    ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ":\n"
                                   << output;
    ASSERT_EQ(WEXITSTATUS(status), 0) << output;
    const std::string marker = "stopping after step ";
    const size_t at = output.find(marker);
    ASSERT_NE(at, std::string::npos) << output;
    const int64_t step = std::stoll(output.substr(at + marker.size()));
    EXPECT_NE(output.find("(checkpoint saved"), std::string::npos) << output;
    EXPECT_TRUE(
        checkpoint::is_complete_checkpoint((folder / "checkpoint" / checkpoint::step_folder_name(step)).string()))
        << "step " << step << "\n"
        << output;
  }
};

TEST_F(Signals, AtRandomMomentsTheJobSavesAndExitsZero) {
  const char* runs_text = std::getenv("TITAN_SIGNAL_TEST_RUNS");
  const int runs = runs_text != nullptr ? std::atoi(runs_text) : 50;
  const unsigned seed = std::random_device{}();
  std::mt19937 random(seed);
  // Up to 1.5 s after the first step: hundreds of steps, dozens of saves and validations.
  std::uniform_int_distribution<int> delay_us(0, 1'500'000);
  for (int run = 0; run < runs; ++run) {
    SCOPED_TRACE(fmt::format("run {} of {} (seed {})", run, runs, seed));
    const fs::path folder = workdir() / "random", log = workdir() / "random.log";
    const bool async = run % 2 == 1;
    const pid_t pid = start_training(folder, async, log);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    kill(pid, run % 3 == 2 ? SIGINT : SIGTERM);
    expect_saved_and_exited_zero(folder, testing::wait_command(pid), log);
    if (HasFatalFailure()) return;
    if (run % 10 == 0) {
      // The saved state loads: the same command resumes from it and trains on.
      const pid_t resumed = testing::start_command(job(folder, async, "--training.steps 1"), log);
      const int status = testing::wait_command(resumed);
      const std::string output = testing::file_text(log);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
      EXPECT_NE(output.find("titan: loaded"), std::string::npos) << output;
    }
  }
}

// Signals every half millisecond from the first step until the job is gone:
// every one is a stop request, none may reach a thread that computes.
TEST_F(Signals, AStormOfSignalsStillEndsInASave) {
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE(fmt::format("run {}", run));
    const fs::path folder = workdir() / "storm", log = workdir() / "storm.log";
    const pid_t pid = start_training(folder, run % 2 == 1, log);
    ASSERT_GT(pid, 0);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, run % 2 == 0 ? SIGTERM : SIGINT);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    expect_saved_and_exited_zero(folder, status, log);
  }
}

// Outside a training loop nothing needs saving: SIGINT ends the command as it
// ends any program.
TEST_F(Signals, WithoutATrainingLoopASignalEndsTheCommand) {
  const fs::path log = workdir() / "bench.log";
  const pid_t pid = testing::start_command(kCli + " bench ops --repeats 1000", log);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto sent = Clock::now();
  kill(pid, SIGINT);
  const int status = testing::wait_command(pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << testing::file_text(log);
  EXPECT_LT(Clock::now() - sent, std::chrono::seconds(5));
}

}  // namespace signal_test
}  // namespace titan
