// The processes of this job. Started by mpirun or srun, it initialises MPI
// (thread-multiple) and spans every rank; started directly, it is a world of
// one and nothing touches MPI. Rank and size come from MPI.
//
// Nodes: the ranks that report the same node name share a node (its memory
// and its fast links); the name is Slurm's SLURMD_NODENAME where srun or
// sbatch set it, else the host name. Nodes are numbered in the order their
// first rank appears, and a rank's local rank is its index among its node's
// ranks. Tests make two "nodes" on one machine by giving ranks host names of
// their own (a UTS namespace per rank: tests/scripts/as_node.sh).
// make_process_group gives the world's ranks as a group of a named backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
  int local_size() const { return local_size_; }  // ranks on this node (they share its memory)
  int node() const { return node_; }              // this rank's node, 0 .. nodes() - 1
  int nodes() const { return static_cast<int>(node_names_.size()); }
  const std::string& node_name() const { return node_names_[static_cast<size_t>(node_)]; }
  // Every rank's node, by world rank.
  const std::vector<int>& node_of_rank() const { return node_of_rank_; }
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
  // Gathers every rank's node name and numbers the nodes (MPI_COMM_WORLD).
  void find_nodes();

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_ = 0;
  std::vector<std::string> node_names_;
  std::vector<int> node_of_rank_;
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
// The name of this process's node: SLURMD_NODENAME, else the host name.
std::string this_node_name();

std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, int device = -1);

// Ends every rank of the job now (MPI_Abort when launched), after the caller
// printed why. For failures no rank can recover from, such as a stalled collective.
[[noreturn]] void abort_job(int exit_code);

}  // namespace titan::comm
