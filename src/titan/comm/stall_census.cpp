#include "titan/comm/stall_census.h"

#include <chrono>

#include <fmt/format.h>

#include "titan/comm/flight_recorder.h"

namespace titan::comm {
namespace {

// Tags on the census's own communicator: questions carry a group name,
// answers "<issued>\n<last collective>".
constexpr int kQuestionTag = 1;
constexpr int kAnswerTag = 2;
// The answering thread looks for questions this often: cheap (one MPI_Test),
// and fast enough for a report that comes after a timeout of seconds.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

std::atomic<StallCensus*> g_census{nullptr};

std::string receive_string(MPI_Comm comm, const MPI_Status& probed) {
  int length = 0;
  MPI_Get_count(&probed, MPI_CHAR, &length);
  std::string text(static_cast<size_t>(length), '\0');
  MPI_Recv(text.data(), length, MPI_CHAR, probed.MPI_SOURCE, probed.MPI_TAG, comm, MPI_STATUS_IGNORE);
  return text;
}

}  // namespace

StallCensus* stall_census() { return g_census.load(); }

StallCensus::StallCensus() {
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  answerer_ = std::thread([this] { answer_loop(); });
  g_census = this;
}

StallCensus::~StallCensus() {
  g_census = nullptr;
  stopping_ = true;
  answerer_.join();
  MPI_Comm_free(&comm_);
}

void StallCensus::add_group(const std::string& name, std::function<GroupProgress()> progress) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_[name] = std::move(progress);
}

void StallCensus::remove_group(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.erase(name);
}

void StallCensus::answer_loop() {
  while (!stopping_) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kQuestionTag, comm_, &pending, &status);
    if (!pending) {
      std::this_thread::sleep_for(kPollInterval);
      continue;
    }
    const std::string name = receive_string(comm_, status);
    // A question means a collective timed out on a peer: this rank's records
    // are what shows where it is (never reached it, or stuck elsewhere), and
    // the asker aborts the job once answered, so write them first.
    FlightRecorder::instance().dump(fmt::format(
        "rank {} timed out in a collective on group '{}' and asked this rank how far it got", status.MPI_SOURCE, name));
    GroupProgress progress;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto group = groups_.find(name);
      if (group != groups_.end()) progress = group->second();
    }
    const std::string answer = fmt::format("{}\n{}", progress.issued, progress.last_issued);
    MPI_Send(answer.data(), static_cast<int>(answer.size()), MPI_CHAR, status.MPI_SOURCE, kAnswerTag, comm_);
  }
}

std::vector<std::string> StallCensus::ask(const std::vector<int>& world_ranks, const std::string& name,
                                          uint64_t waiting_in, double seconds) {
  std::vector<MPI_Request> questions(world_ranks.size());
  for (size_t i = 0; i < world_ranks.size(); ++i) {
    MPI_Isend(name.data(), static_cast<int>(name.size()), MPI_CHAR, world_ranks[i], kQuestionTag, comm_, &questions[i]);
  }
  std::map<int, std::string> answers;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (answers.size() < world_ranks.size() && std::chrono::steady_clock::now() < deadline) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm_, &pending, &status);
    if (!pending) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    answers[status.MPI_SOURCE] = receive_string(comm_, status);
  }
  std::vector<std::string> lines;
  for (int rank : world_ranks) {
    const auto answer = answers.find(rank);
    if (answer == answers.end()) {
      lines.push_back(fmt::format("rank {} did not answer (dead, or hung outside titan)", rank));
      continue;
    }
    const size_t newline = answer->second.find('\n');
    const uint64_t issued = std::stoull(answer->second.substr(0, newline));
    const std::string last = answer->second.substr(newline + 1);
    lines.push_back(issued < waiting_in
                        ? fmt::format("rank {} has NOT reached it: it issued {} collectives on '{}' (the last: {}); "
                                      "it is the one that stalled",
                                      rank, issued, name, last.empty() ? "none" : last)
                        : fmt::format("rank {} reached it (it issued {} collectives on '{}')", rank, issued, name));
  }
  // Questions to ranks that never answered stay unmatched; the job is aborting anyway.
  for (MPI_Request& question : questions) MPI_Request_free(&question);
  return lines;
}

}  // namespace titan::comm
