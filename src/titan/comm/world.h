// The processes of this job. Started by mpirun or srun, it initialises MPI
// (thread-multiple) and spans every rank; started directly, it is a world of
// one and nothing touches MPI. Rank, size and local rank come from MPI.
// make_process_group gives the world's ranks as a group of a named backend.
#pragma once

#include <memory>
#include <string>

#include "titan/comm/process_group.h"

namespace titan::comm {

class StallCensus;

class World {
 public:
  // The job's world, initialised on first use. Collectives on it time out
  // after `timeout_seconds` (see ProcessGroup).
  static World& instance(double timeout_seconds = 600.0);
  ~World();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }  // ranks on this host (they share its memory)
  bool launched() const { return launched_; }
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  double timeout_seconds() const { return timeout_seconds_; }

  // True when this process was started by an MPI launcher.
  static bool started_by_launcher();

  // Called by a rank whose start-up failed (a config key, a missing file:
  // errors every rank meets alike): whether every rank of the job failed in
  // start-up too, agreed within `timeout_seconds` over a communicator kept for
  // this alone. Ranks still working, or waiting in a collective, never join,
  // so false means "only some ranks failed": the job must be aborted.
  bool every_rank_failed_startup(double timeout_seconds);

 private:
  explicit World(double timeout_seconds);
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool launched_ = false;
  double timeout_seconds_;
  void* startup_comm_ = nullptr;         // MPI_Comm (mpi.h stays out of this header): the start-up agreement's
  std::unique_ptr<StallCensus> census_;  // under a launcher: names stalled ranks after a timeout
  std::shared_ptr<ProcessGroup> group_;
};

// The world's ranks as a group of `backend`: "mpi" (CPU tensors; the world's
// own group, a world of one when not launched) or "nccl" (CUDA tensors on
// cuda:`device`, by default this rank's local rank, i.e. one GPU per rank; its
// communicator is bootstrapped over the world's group; CUDA builds only).
// Collective over the world: every rank must call it.
std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, int device = -1);

// Ends every rank of the job now (MPI_Abort when launched), after the caller
// printed why. For failures no rank can recover from, such as a stalled collective.
[[noreturn]] void abort_job(int exit_code);

}  // namespace titan::comm
