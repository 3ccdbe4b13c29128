// Elastic replica groups (fault_tolerance.*, docs/fault-tolerance.md) as a
// user runs them: `titan lighthouse` and three replica groups of two ranks,
// each its own `mpirun -np 2 titan train`. One group is killed with SIGKILL
// (its whole process group) at a random step: the other two go on without a
// restart, and their losses from the first step without it equal those of a
// two-group run started from their checkpoint of the step before. The killed
// group is started again, takes the state from a live peer and rejoins; at
// the end all three hold bitwise equal weights.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_job.h"
#include "titan/checkpoint/checkpoint_folder.h"

namespace titan {
namespace fault_tolerance_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Processes started in their own process group (so SIGKILL reaches mpirun and
// every rank it started), all killed when the test ends, whatever happened.
class ProcessGroups {
 public:
  ~ProcessGroups() {
    for (const pid_t pid : running_) kill_group(pid);
  }
  pid_t start(const std::string& command, const fs::path& log) {
    const pid_t child = fork();
    if (child == 0) {
      setpgid(0, 0);
      const std::string line = "exec " + command + " > '" + log.string() + "' 2>&1";
      execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(child, child);
    running_.push_back(child);
    return child;
  }
  void kill_group(pid_t pid) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    wait(pid);
  }
  // Exit status, or -1 if it ran past `limit`.
  int wait(pid_t pid, std::chrono::seconds limit = 120s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (true) {
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid || (done < 0 && errno == ECHILD)) break;
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(20ms);
    }
    std::erase(running_, pid);
    // Ranks that outlived mpirun (killed with it) go too.
    kill(-pid, SIGKILL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  std::vector<pid_t> running_;
};

class FaultTolerance : public ::testing::Test {
 protected:
  static constexpr int kScheduleSteps = 14;
  void SetUp() override {
    dir_ = testing::per_test_folder("fault_tolerance");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    data_ = fs::path(::testing::TempDir()) / "titan_ft_corpus";
    testing::prepare_test_corpus(data_, dir_ / "prepare.log");
    model_ = testing::write_tiny_llama_config(dir_ / "model");
  }

  // A lighthouse on a free port; returns its address once it listens.
  std::string start_lighthouse(ProcessGroups& processes, const std::string& name, int min_replicas) {
    const fs::path log = dir_ / (name + ".log");
    processes.start(fmt::format("{} lighthouse --bind 127.0.0.1:0 --min_replicas {} --join_timeout_ms 2000 "
                                "--heartbeat_timeout_ms 1000 --quorum_tick_ms 20",
                                TITAN_CLI_PATH, min_replicas),
                    log);
    const std::regex listening("listening on port ([0-9]+)");
    for (int i = 0; i < 500; ++i) {
      std::smatch match;
      const std::string text = testing::file_text(log);
      if (std::regex_search(text, match, listening)) return "127.0.0.1:" + match[1].str();
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "the lighthouse did not start:\n" << testing::file_text(log);
    return "";
  }

  // Replica group `replica` of three (2 ranks, FSDP 2) training `steps` of a
  // schedule of kScheduleSteps (a shorter reference run keeps the same learning rates).
  std::string group_command(const std::string& lighthouse, const std::string& dump, int replica, int steps) {
    return fmt::format("env TORCHFT_LIGHTHOUSE={} {}", lighthouse,
                       testing::mpirun(2) + " " +
                           testing::tiny_train_command(
                               data_, model_, dir_ / dump,
                               fmt::format("--training.steps {} --lr_scheduler.total_steps {} "
                                           "--parallelism.data_parallel_shard_degree 2 --validation.enable false "
                                           "--checkpoint.enable true --checkpoint.interval 1 --comm.timeout_seconds 60 "
                                           "--fault_tolerance.enable true --fault_tolerance.group_size 3 "
                                           "--fault_tolerance.replica_id {} --fault_tolerance.min_replica_size 2 "
                                           "--fault_tolerance.process_group_timeout_ms 5000",
                                           steps, kScheduleSteps, replica)));
  }

  std::vector<double> column(const std::string& dump, const char* field) {
    return testing::metrics_column(dir_ / dump / "metrics.jsonl", field);
  }

  // One field of every step record, by step.
  std::map<int64_t, double> by_step(const std::string& dump, const char* field) {
    const std::vector<double> steps = column(dump, "step"), values = column(dump, field);
    std::map<int64_t, double> result;
    for (size_t i = 0; i < steps.size(); ++i) result[static_cast<int64_t>(steps[i])] = values[i];
    return result;
  }

  fs::path dir_, data_, model_;
};

// How many step records `dump` has written.
size_t records(const fs::path& jsonl) {
  size_t count = 0;
  const std::string text = testing::file_text(jsonl);
  for (size_t at = text.find("\"step\""); at != std::string::npos; at = text.find("\"step\"", at + 1)) ++count;
  return count;
}

// replicas_live of the last whole step record of a metrics.jsonl still being written (0 before the first).
double last_replicas_live(const fs::path& jsonl) {
  double live = 0.0;
  std::istringstream text(testing::file_text(jsonl));
  for (std::string line; std::getline(text, line);) {
    if (text.eof()) break;  // no newline yet: a line being written
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("replicas_live")) live = record["replicas_live"].get<double>();
  }
  return live;
}

TEST_F(FaultTolerance, SurvivorsGoOnAndARestartedGroupRejoinsBitwiseEqual) {
  constexpr int kSteps = kScheduleSteps;
  ProcessGroups processes;
  const std::string lighthouse = start_lighthouse(processes, "lighthouse", 1);
  ASSERT_FALSE(lighthouse.empty());
  pid_t groups[3];
  for (int r = 0; r < 3; ++r) {
    groups[r] =
        processes.start(group_command(lighthouse, fmt::format("g{}", r), r, kSteps), dir_ / fmt::format("g{}.log", r));
  }
  // Group 2 dies at a random early step, once all three train together.
  std::mt19937 random(std::random_device{}());
  const size_t kill_after = 3 + random() % 3;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  const auto last_live = [&](const std::string& dump) { return last_replicas_live(dir_ / dump / "metrics.jsonl"); };
  while (records(dir_ / "g2" / "metrics.jsonl") < kill_after || last_live("g2") != 3.0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << testing::file_text(dir_ / "g2.log");
    std::this_thread::sleep_for(5ms);
  }
  processes.kill_group(groups[2]);
  // The survivors go on without it...
  while (last_live("g0") != 2.0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << testing::file_text(dir_ / "g0.log");
    std::this_thread::sleep_for(5ms);
  }
  // ... and it is started again, in its own folder: it resumes its last checkpoint, then catches up from a peer.
  groups[2] = processes.start(group_command(lighthouse, "g2", 2, kSteps), dir_ / "g2_restart.log");
  for (int r = 0; r < 3; ++r) {
    const int status = processes.wait(groups[r]);
    ASSERT_EQ(status, 0) << "group " << r << "\n"
                         << testing::file_text(dir_ / (r == 2 ? "g2_restart.log" : fmt::format("g{}.log", r)));
  }

  // The survivors ran each step once (no restart) up to the last; a group that
  // started late may have taken its first steps from a peer, so steps are keyed by number.
  const std::map<int64_t, double> live = by_step("g0", "replicas_live");
  for (int r = 0; r < 2; ++r) {
    const std::string dump = fmt::format("g{}", r);
    const std::vector<double> steps = column(dump, "step");
    EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()) &&
                std::adjacent_find(steps.begin(), steps.end()) == steps.end())
        << "group " << r << " ran a step twice";
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.back(), kSteps) << "group " << r;
    for (const auto& [step, count] : by_step(dump, "replicas_live")) {
      if (live.contains(step)) {
        EXPECT_EQ(count, live.at(step)) << "group " << r << " step " << step;
      }
    }
  }
  // The first step without group 2 (after one with all three), and the first with it back.
  int64_t first_without = 0, first_back = 0;
  bool all_three = false;
  for (const auto& [step, count] : live) {
    if (count == 3.0 && first_without == 0) all_three = true;
    if (count == 2.0 && all_three && first_without == 0) first_without = step;
    if (count == 3.0 && first_without != 0 && first_back == 0) first_back = step;
  }
  ASSERT_NE(first_without, 0) << "group 2 was never left out";
  ASSERT_NE(first_back, 0) << "group 2 never rejoined:\n" << testing::file_text(dir_ / "g2_restart.log");
  for (int64_t step = first_without - 1; step < first_back; ++step) {
    ASSERT_TRUE(live.contains(step)) << "group 0 has no record of step " << step;
  }
  // The restarted group took the state of the step before it rejoined from a peer.
  const std::string restarted = testing::file_text(dir_ / "g2_restart.log");
  EXPECT_NE(restarted.find("fetching the state from replica group"), std::string::npos) << restarted;
  const std::vector<double> recovered = column("g2", "ft_steps_recovered");
  EXPECT_GT(*std::max_element(recovered.begin(), recovered.end()), 0.0);

  // All three hold bitwise equal weights at the end (every step after the rejoin averaged over three).
  const auto export_of = [&](int r) {
    return testing::read_all_tensors(dir_ / fmt::format("g{}", r) / "checkpoint" /
                                     checkpoint::step_folder_name(kSteps) / "model.safetensors");
  };
  const auto weights0 = export_of(0);
  ASSERT_FALSE(weights0.empty());
  for (int r = 1; r < 3; ++r) {
    const auto weights = export_of(r);
    ASSERT_EQ(weights.size(), weights0.size());
    for (const auto& [name, tensor] : weights0) {
      const Tensor& other = weights.at(name);
      ASSERT_EQ(tensor.nbytes(), other.nbytes()) << name;
      EXPECT_EQ(std::memcmp(tensor.data_ptr(), other.data_ptr(), tensor.nbytes()), 0) << "group " << r << ": " << name;
    }
  }

  // The reference: two groups only, from the survivors' checkpoint of the step before the kill showed,
  // up to the step before group 2 came back. Their losses equal the survivors'.
  const std::string reference_lighthouse = start_lighthouse(processes, "reference_lighthouse", 2);
  ASSERT_FALSE(reference_lighthouse.empty());
  pid_t references[2];
  for (int r = 0; r < 2; ++r) {
    const std::string name = fmt::format("ref{}", r);
    fs::create_directories(dir_ / name / "checkpoint");
    const std::string step = checkpoint::step_folder_name(first_without - 1);
    fs::copy(dir_ / fmt::format("g{}", r) / "checkpoint" / step, dir_ / name / "checkpoint" / step,
             fs::copy_options::recursive);
    references[r] = processes.start(group_command(reference_lighthouse, name, r, static_cast<int>(first_back - 1)),
                                    dir_ / (name + ".log"));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(processes.wait(references[r]), 0) << testing::file_text(dir_ / fmt::format("ref{}.log", r));
    const std::map<int64_t, double> survivor = by_step(fmt::format("g{}", r), "loss");
    std::map<int64_t, double> expected;
    for (int64_t step = first_without; step < first_back; ++step) expected[step] = survivor.at(step);
    EXPECT_EQ(by_step(fmt::format("ref{}", r), "loss"), expected)
        << "group " << r << ": steps " << first_without << " to " << first_back - 1;
  }
}

// The commit vote: group 2 dies after its all-reduce of a step succeeded on
// every member, before it votes. The lighthouse aborts the step once its
// heartbeat stops; the survivors discard the three-group average and average
// that step again, just the two of them, and end bitwise equal.
TEST_F(FaultTolerance, AGroupDeadBeforeItsVoteMakesTheSurvivorsAverageTheStepAgain) {
  constexpr int kSteps = 7, kDie = 5;
  ProcessGroups processes;
  const std::string lighthouse = start_lighthouse(processes, "lighthouse", 1);
  ASSERT_FALSE(lighthouse.empty());
  pid_t groups[3];
  for (int r = 0; r < 3; ++r) {
    const std::string env = r == 2 ? fmt::format("env TITAN_TEST_FT_DIE_BEFORE_VOTE={} ", kDie) : "";
    groups[r] = processes.start(env + group_command(lighthouse, fmt::format("g{}", r), r, kSteps),
                                dir_ / fmt::format("g{}.log", r));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(processes.wait(groups[r]), 0) << testing::file_text(dir_ / fmt::format("g{}.log", r));
  }
  EXPECT_NE(processes.wait(groups[2]), 0) << testing::file_text(dir_ / "g2.log");
  for (int r = 0; r < 2; ++r) {
    const std::string dump = fmt::format("g{}", r);
    const std::map<int64_t, double> live = by_step(dump, "replicas_live"), retries = by_step(dump, "ft_retries");
    ASSERT_TRUE(live.contains(kDie - 1) && live.contains(kDie)) << dump;
    EXPECT_EQ(live.at(kDie - 1), 3.0) << dump << ": group 2 had not joined before it died";
    EXPECT_EQ(live.at(kDie), 2.0) << dump;
    EXPECT_EQ(retries.at(kDie), 1.0) << dump;
    EXPECT_NE(testing::file_text(dir_ / (dump + ".log")).find(fmt::format("did not commit step {}", kDie)),
              std::string::npos)
        << testing::file_text(dir_ / (dump + ".log"));
  }
  EXPECT_NE(testing::file_text(dir_ / "lighthouse.log").find(fmt::format("does not commit step {}", kDie)),
            std::string::npos)
      << testing::file_text(dir_ / "lighthouse.log");
  const auto export_of = [&](int r) {
    return testing::read_all_tensors(dir_ / fmt::format("g{}", r) / "checkpoint" /
                                     checkpoint::step_folder_name(kSteps) / "model.safetensors");
  };
  const auto weights0 = export_of(0), weights1 = export_of(1);
  ASSERT_FALSE(weights0.empty());
  ASSERT_EQ(weights0.size(), weights1.size());
  for (const auto& [name, tensor] : weights0) {
    const Tensor& other = weights1.at(name);
    ASSERT_EQ(tensor.nbytes(), other.nbytes()) << name;
    EXPECT_EQ(std::memcmp(tensor.data_ptr(), other.data_ptr(), tensor.nbytes()), 0) << name;
  }
}

TEST_F(FaultTolerance, BadSettingsAreUserErrors) {
  const auto run = [&](const std::string& extra, const std::string& env = "") {
    return testing::run_to_completion(
        env + testing::tiny_train_command(data_, model_, dir_ / "bad", "--training.steps 1 " + extra),
        dir_ / "bad.log");
  };
  testing::expect_user_error(run("--fault_tolerance.semi_sync_method diloco"),
                             {"fault_tolerance.semi_sync_method", "not built"});
  testing::expect_user_error(run("--fault_tolerance.enable true --fault_tolerance.group_size 2 "
                                 "--fault_tolerance.replica_id 2"),
                             {"fault_tolerance.replica_id 2"});
  testing::expect_user_error(run("--fault_tolerance.enable true --fault_tolerance.group_size 2 "
                                 "--fault_tolerance.process_group nccl"),
                             {"fault_tolerance.process_group", "gloo"});
  testing::expect_user_error(
      run("--fault_tolerance.enable true --fault_tolerance.group_size 2", "env -u TORCHFT_LIGHTHOUSE "),
      {"TORCHFT_LIGHTHOUSE"});
}

}  // namespace fault_tolerance_test
}  // namespace titan
