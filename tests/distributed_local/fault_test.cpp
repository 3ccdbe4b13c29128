// How a distributed job ends when a rank fails: the tests launch
// tests/distributed/fault_job under mpirun and check the exit status, the
// message naming the failed rank or the stalled collective, and that the job
// ends within a bound rather than hanging.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace fault_test {

struct JobResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr of every rank and of mpirun
  double seconds = 0.0;
};

// Runs the fault job on `ranks` ranks; coreutils' timeout is a backstop so a
// hang fails the test with its output instead of reaching CTest's limit.
JobResult run_fault_job(int ranks, const std::string& arguments) {
  const std::string command = "OMPI_MCA_mpi_yield_when_idle=1 timeout -k 5 90 " + std::string(TITAN_MPIEXEC) +
                              " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " " +
                              TITAN_FAULT_JOB + " " + arguments + " 2>&1";
  JobResult result;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return result;
  }
  char buffer[4096];
  size_t read = 0;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, read);
  const int status = pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

// The lines of `text` that contain every one of `fragments`, in that order.
std::vector<std::string> lines_with(const std::string& text, const std::vector<std::string>& fragments) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t at = 0;
    bool all = true;
    for (const auto& fragment : fragments) {
      at = line.find(fragment, at);
      if (at == std::string::npos) {
        all = false;
        break;
      }
      at += fragment.size();
    }
    if (all) out.push_back(line);
  }
  return out;
}

// The rank number right after `prefix` in `line` (-1 if none).
int rank_after(const std::string& line, const std::string& prefix) {
  const size_t at = line.find(prefix);
  if (at == std::string::npos) return -1;
  try {
    return std::stoi(line.substr(at + prefix.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

TEST(Faults, KilledRankEndsTheJobNamingIt) {
  const JobResult job = run_fault_job(3, "kill 1");
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_NE(job.exit_code, 124) << "the job hung until the backstop timeout:\n" << job.output;
  EXPECT_LT(job.seconds, 30.0) << job.output;
  // The fault came after a collective every rank finished...
  EXPECT_TRUE(contains(job.output, "rank 1: all_reduce 1 done")) << job.output;
  // ...and mpirun names the rank that died and how.
  EXPECT_EQ(lines_with(job.output, {"process rank 1 with PID ", " on node ", " exited on signal 9"}).size(), 1u)
      << job.output;
}

TEST(Faults, StalledCollectiveAbortsEveryRankAfterTheTimeout) {
  constexpr double kTimeout = 2.0;
  const JobResult job = run_fault_job(3, "stall 1 2");
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_NE(job.exit_code, 124) << "the job hung until the backstop timeout:\n" << job.output;
  // Ended by the collective timeout: not before it, and long before the stalled rank woke up (300 s).
  EXPECT_GE(job.seconds, kTimeout) << job.output;
  EXPECT_LT(job.seconds, kTimeout + 25.0) << job.output;
  // The waiting ranks name themselves, the collective, the group and the timeout...
  const auto reports = lines_with(job.output, {"titan: rank ",
                                               ": all_reduce(sum) of [4] f32 (collective #2 on group 'world') did "
                                               "not complete within 2 s (comm.timeout_seconds): a peer rank died or "
                                               "stalled; aborting every rank"});
  EXPECT_FALSE(reports.empty()) << job.output;
  for (const auto& line : reports) EXPECT_NE(rank_after(line, "titan: rank "), 1) << line;
  // ...and the rank that never reached the collective (asked through the
  // stall census, whose thread answers while the rank's training thread sleeps):
  EXPECT_FALSE(lines_with(job.output, {"rank 1 has NOT reached it: it issued 1 collectives on 'world'",
                                       "it is the one that stalled"})
                   .empty())
      << job.output;
  EXPECT_TRUE(lines_with(job.output, {"rank 0 has NOT reached it"}).empty()) << job.output;
  EXPECT_TRUE(lines_with(job.output, {"rank 2 has NOT reached it"}).empty()) << job.output;
  // ...and take every rank down with them: mpirun exits with the code given
  // to MPI_Abort. (Open MPI 4.1 sometimes loses its own "MPI_ABORT was invoked
  // on rank N" notice in a race, so it is checked only when it is there.)
  EXPECT_EQ(job.exit_code, 3) << job.output;
  for (const auto& line : lines_with(job.output, {"MPI_ABORT was invoked on rank "})) {
    const int aborting = rank_after(line, "MPI_ABORT was invoked on rank ");
    EXPECT_TRUE(aborting == 0 || aborting == 2) << line;
  }
  EXPECT_FALSE(contains(job.output, "all_reduce 2 done")) << job.output;
}

// A rank that fails with an error must not leave its peers waiting out the
// collective timeout (60 s here): abort_job ends the job at once.
TEST(Faults, ErrorOnOneRankEndsTheJobAtOnce) {
  const JobResult job = run_fault_job(2, "error 1 60");
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_LT(job.seconds, 30.0) << job.output;
  EXPECT_TRUE(contains(job.output, "titan: error on rank 1: fault_job: rank 1 hit a bad input")) << job.output;
  EXPECT_EQ(job.exit_code, 1) << job.output;  // abort_job's code, passed on by mpirun
}

}  // namespace fault_test
