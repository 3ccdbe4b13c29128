// Which rank stalled: when a collective times out, the rank that waited asks
// every peer of the group how far it got (collectives issued on that group,
// and the last one's description). A thread on every rank answers, so a rank
// whose training thread is stuck in compute, in a sleep or in another
// collective still answers; a rank that does not answer is dead or hung hard.
// The report then names the ranks that never reached the collective.
#pragma once

#include <mpi.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace titan::comm {

// How far this rank got on one group.
struct GroupProgress {
  uint64_t issued = 0;      // collectives issued on the group by this rank
  std::string last_issued;  // the description of the last one
};

class StallCensus {
 public:
  // Collective over MPI_COMM_WORLD (it duplicates it); starts the answering thread.
  StallCensus();
  // Stops the answering thread; must run before MPI_Finalize.
  ~StallCensus();
  StallCensus(const StallCensus&) = delete;
  StallCensus& operator=(const StallCensus&) = delete;

  // Groups report their progress through these, by name.
  void add_group(const std::string& name, std::function<GroupProgress()> progress);
  void remove_group(const std::string& name);

  // Asks each of `world_ranks` about group `name` and waits up to `seconds` for
  // the answers; one line per rank: "rank 2 has issued 4 collectives on 'world'
  // (the last: ...)" or "rank 3 did not answer (dead, or hung outside titan)".
  // `waiting_in` is the 1-based number of the collective that timed out here,
  // so ranks behind it are flagged as the ones that never reached it.
  std::vector<std::string> ask(const std::vector<int>& world_ranks, const std::string& name, uint64_t waiting_in,
                               double seconds);

 private:
  void answer_loop();

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mutex_;
  std::map<std::string, std::function<GroupProgress()>> groups_;
  std::atomic<bool> stopping_{false};
  std::thread answerer_;
};

// The job's census when it runs under a launcher (World creates it); nullptr otherwise.
StallCensus* stall_census();

}  // namespace titan::comm
