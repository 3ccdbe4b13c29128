// titan under a real Slurm on this machine (tests/scripts/slurm_cluster.sh:
// munged, slurmctld and two slurmd, "node0" and "node1" of 2 CPUs each):
// `srun -N2 -n4 titan train` launched directly (PMIx, no mpirun) sees two
// nodes and trains as mpirun does; scripts/slurm/train.sbatch runs to the end;
// and a job stopped mid-run, by `scontrol requeue` and by the time-limit
// signal (--signal=B:TERM), saves, is requeued, resumes and ends bitwise where
// the uninterrupted job ends.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_job.h"
#include "titan/checkpoint/checkpoint_folder.h"

namespace titan {
namespace slurm_test {

namespace fs = std::filesystem;
using testing::file_text;
using testing::metrics_column;
using testing::read_all_tensors;

const std::string kScript = std::string(TITAN_SOURCE_DIR) + "/tests/scripts/slurm_cluster.sh";
const std::string kSbatch = std::string(TITAN_SOURCE_DIR) + "/scripts/slurm/train.sbatch";

// The cluster for one test: started by the constructor, stopped (daemons, job
// steps and their processes) by the destructor, failed test or not. Its folder
// is short and under /tmp: PMIx puts Unix sockets in it (108-byte paths).
class SlurmCluster {
 public:
  explicit SlurmCluster(const fs::path& log) {
    char folder[] = "/tmp/titan-slurm-XXXXXX";
    if (mkdtemp(folder) == nullptr) return;
    dir_ = folder;
    status_ = testing::run_command(kScript + " start " + dir_.string(), log, &output_);
  }
  ~SlurmCluster() {
    if (dir_.empty()) return;
    testing::run_command(kScript + " stop " + dir_.string(), dir_.parent_path() / (dir_.filename().string() + ".stop"));
    std::error_code ignored;
    fs::remove(dir_.parent_path() / (dir_.filename().string() + ".stop"), ignored);
    fs::remove_all(dir_, ignored);
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  bool started() const { return !dir_.empty() && WIFEXITED(status_) && WEXITSTATUS(status_) == 0; }
  // The script's exit 2: Slurm cannot run here at all (a tool missing, no root, no namespaces).
  bool unavailable() const { return dir_.empty() || (WIFEXITED(status_) && WEXITSTATUS(status_) == 2); }
  const std::string& output() const { return output_; }
  // What a command needs to talk to this cluster, and the settings every titan rank gets.
  std::string env() const {
    return "SLURM_CONF=" + (dir_ / "slurm.conf").string() + " OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 ";
  }
  // `scontrol show job` of `job` as one line ("" once Slurm forgot it).
  std::string job_line(const std::string& job, const fs::path& log) const {
    std::string out;
    testing::run_command(env() + "scontrol -o show job " + job, log, &out);
    return out;
  }

 private:
  fs::path dir_;
  int status_ = -1;
  std::string output_;
};

// Starts a cluster or skips the test when Slurm cannot run on this machine.
#define START_CLUSTER_OR_SKIP(cluster)                                                  \
  if ((cluster).unavailable()) GTEST_SKIP() << "no Slurm here: " << (cluster).output(); \
  ASSERT_TRUE((cluster).started()) << "the Slurm cluster did not start:\n" << (cluster).output()

// The tiny Llama's job: `steps` steps, no save but the last one and one a stop asks for.
std::string train_args(const fs::path& work, const fs::path& dump, int steps) {
  const std::string command = testing::tiny_train_command(
      work / "data", testing::write_tiny_llama_config(work / "model"), dump,
      fmt::format("--training.steps {} --checkpoint.enable true --checkpoint.interval 1000 "
                  "--validation.enable false --training.seq_len 64 --training.local_batch_size 2",
                  steps));
  const std::string prefix = std::string(TITAN_CLI_PATH) + " train ";
  return command.substr(command.find(prefix) + prefix.size());
}

// Step records in a metrics.jsonl, counted without parsing (it is being written).
size_t logged_steps(const fs::path& jsonl) {
  const std::string text = file_text(jsonl);
  size_t count = 0;
  for (size_t at = text.find("\"step\""); at != std::string::npos; at = text.find("\"step\"", at + 1)) ++count;
  return count;
}

// The steps titan stopped after on a signal, in order.
std::vector<long long> stop_steps(const std::string& output) {
  std::vector<long long> steps;
  const std::regex stopping("titan: stopping after step ([0-9]+)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), stopping); it != std::sregex_iterator(); ++it) {
    steps.push_back(std::stoll((*it)[1].str()));
  }
  return steps;
}

std::string job_state(const std::string& line) {
  std::smatch match;
  return std::regex_search(line, match, std::regex("JobState=(\\S+)")) ? match[1].str() : "";
}

// Waits until `done` (polled every 50 ms) or `seconds` pass; whether it happened.
template <typename Done>
bool wait_for(Done done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

std::map<std::string, Tensor> final_weights(const fs::path& dump, int steps) {
  return read_all_tensors(dump / "checkpoint" / checkpoint::step_folder_name(steps) / "model.safetensors");
}

// Losses and the final model export, bitwise.
void expect_same_run(const fs::path& expected, const fs::path& actual, int steps) {
  SCOPED_TRACE(actual.string());
  const auto losses = metrics_column(actual / "metrics.jsonl", "loss");
  EXPECT_EQ(losses.size(), static_cast<size_t>(steps));
  EXPECT_EQ(losses, metrics_column(expected / "metrics.jsonl", "loss"));
  const auto weights = final_weights(actual, steps);
  const auto reference = final_weights(expected, steps);
  ASSERT_FALSE(reference.empty()) << "no model export in " << expected;
  ASSERT_EQ(weights.size(), reference.size());
  for (const auto& [name, tensor] : reference) {
    ASSERT_TRUE(weights.count(name)) << name;
    EXPECT_EQ(weights.at(name).to_floats(), tensor.to_floats()) << name;
  }
}

TEST(Slurm, SrunStartsRanksOnTwoNodesLikeMpirun) {
  const fs::path work = testing::per_test_folder("slurm_test");
  fs::remove_all(work);
  fs::create_directories(work);
  SlurmCluster cluster(work / "cluster.log");
  START_CLUSTER_OR_SKIP(cluster);
  testing::prepare_test_corpus(work / "data", work / "prepare.log");
  constexpr int kSteps = 6;
  const std::string srun = testing::run_ok(
      cluster.env() + "srun --mpi=pmix -N2 -n4 " + TITAN_CLI_PATH + " train " + train_args(work, work / "srun", kSteps),
      work / "srun.log");
  EXPECT_NE(srun.find("titan: 4 rank(s) on 2 node(s), 2 rank(s) per node; rank 0 on node0"), std::string::npos) << srun;
  // The reference: the same job under mpirun, its ranks on two "nodes" of this machine the same way.
  testing::run_ok(testing::mpirun(4, "--mca btl tcp,self ") + TITAN_SOURCE_DIR + "/tests/scripts/as_node.sh 2 " +
                      TITAN_CLI_PATH + " train " + train_args(work, work / "mpirun", kSteps),
                  work / "mpirun.log");
  expect_same_run(work / "mpirun", work / "srun", kSteps);
  // Without a PMI the tasks cannot find each other: titan refuses instead of training N separate jobs.
  testing::expect_user_error(testing::run_to_completion(cluster.env() + "srun --mpi=none -N2 -n2 " + TITAN_CLI_PATH +
                                                            " train " + train_args(work, work / "no_pmi", kSteps),
                                                        work / "no_pmi.log"),
                             {"srun started 2 tasks", "srun --mpi=pmix"});
  EXPECT_FALSE(fs::exists(work / "no_pmi" / "metrics.jsonl"));
}

TEST(Slurm, SbatchJobStoppedTwiceResumesBitwise) {
  const fs::path work = testing::per_test_folder("slurm_test");
  fs::remove_all(work);
  fs::create_directories(work);
  SlurmCluster cluster(work / "cluster.log");
  START_CLUSTER_OR_SKIP(cluster);
  testing::prepare_test_corpus(work / "data", work / "prepare.log");
  constexpr int kSteps = 14;
  const std::string sbatch = cluster.env() + "TITAN=" + TITAN_CLI_PATH + " sbatch --parsable -N2 --ntasks-per-node=2 ";

  // The uninterrupted job (sbatch --wait returns the job's exit code).
  testing::run_ok(sbatch + "--wait -o " + (work / "straight.out").string() + " " + kSbatch + " " +
                      train_args(work, work / "straight", kSteps),
                  work / "straight.log");
  EXPECT_EQ(metrics_column(work / "straight" / "metrics.jsonl", "loss").size(), static_cast<size_t>(kSteps))
      << file_text(work / "straight.out");

  // The same job, stopped twice mid-run.
  std::string job = testing::run_ok(sbatch + "-o " + (work / "stopped.out").string() + " " + kSbatch + " " +
                                        train_args(work, work / "stopped", kSteps),
                                    work / "submit.log");
  job = job.substr(0, job.find_first_of(";\n"));
  ASSERT_FALSE(job.empty());
  const fs::path metrics = work / "stopped" / "metrics.jsonl";
  const fs::path out = work / "stopped.out";
  // 1. The scheduler requeues it (as preemption does): Slurm signals every process of the job.
  ASSERT_TRUE(wait_for([&] { return logged_steps(metrics) >= 3; }, 60)) << file_text(out);
  testing::run_ok(cluster.env() + "scontrol requeue " + job, work / "requeue.log");
  // 2. After it resumed: the time-limit warning (--signal=B:TERM@120) reaches the batch script alone.
  ASSERT_TRUE(wait_for([&] { return file_text(out).find("(restart 1)") != std::string::npos; }, 60)) << file_text(out);
  ASSERT_TRUE(wait_for([&] { return stop_steps(file_text(out)).size() == 1; }, 60)) << file_text(out);
  const long long first_stop = stop_steps(file_text(out))[0];
  ASSERT_TRUE(wait_for([&] { return logged_steps(metrics) >= static_cast<size_t>(first_stop) + 3; }, 60))
      << file_text(out);
  testing::run_ok(cluster.env() + "scancel --batch --signal=TERM " + job, work / "signal.log");
  // The script passes it on and requeues the job, which runs to the end.
  std::string state;
  ASSERT_TRUE(wait_for(
      [&] {
        state = job_state(cluster.job_line(job, work / "show.log"));
        return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT";
      },
      90))
      << state << "\n"
      << file_text(out);
  const std::string output = file_text(out);
  EXPECT_EQ(state, "COMPLETED") << output;
  EXPECT_NE(output.find("(restart 2)"), std::string::npos) << output;
  EXPECT_NE(output.find("requeueing job " + job), std::string::npos) << output;
  // Each stop saved the step it ended, mid-run, and the next run resumed from it.
  const std::vector<long long> stops = stop_steps(output);
  ASSERT_EQ(stops.size(), 2u) << output;
  EXPECT_LT(stops[0], stops[1]);
  EXPECT_LT(stops[1], kSteps) << "the second stop came too late to test anything";
  for (const long long step : stops) {
    EXPECT_NE(output.find(fmt::format("(step {},", step)), std::string::npos) << output;
  }
  expect_same_run(work / "straight", work / "stopped", kSteps);
}

}  // namespace slurm_test
}  // namespace titan
