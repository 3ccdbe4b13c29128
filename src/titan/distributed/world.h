// The processes of this job. Started by mpirun or srun, it initialises MPI
// (thread-multiple) and spans every rank; started directly, it is a world of
// one and nothing touches MPI. Rank, size and local rank come from MPI.
#pragma once

#include <memory>

#include "titan/distributed/process_group.h"

namespace titan::distributed {

class World {
 public:
  // The job's world, initialised on first use. Collectives on it time out
  // after `timeout_seconds` (see ProcessGroup).
  static World& instance(double timeout_seconds = 600.0);
  ~World();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  bool launched() const { return launched_; }
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }

  // True when this process was started by an MPI launcher.
  static bool started_by_launcher();

 private:
  explicit World(double timeout_seconds);
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool launched_ = false;
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace titan::distributed
