// The `mpi` backend: CPU tensors, Open MPI. Each group owns one worker thread
// that runs its collectives in the order they were issued (the same order on
// every rank), so callers return at once and compute overlaps communication.
// Sends and receives are posted at once as non-blocking requests instead (any
// order, any number in flight: what pipeline schedules need).
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "titan/comm/flight_recorder.h"
#include "titan/comm/process_group.h"

namespace titan::comm {

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
  MpiProcessGroup(MPI_Comm comm, std::string name, double timeout_seconds);
  ~MpiProcessGroup() override;

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> all_to_all(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& tensor, int peer, int tag) override;
  void barrier() override;
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;
  CommStats stats() const override;
  void reset_stats() override;
  void set_spans_nodes(bool spans) override;  // and marks the group in the flight recorder

  double timeout_seconds() const { return timeout_seconds_; }
  // Called by a Work whose wait() timed out on the group's `sequence`-th
  // collective: prints what stalled, which peers never reached it (asking
  // them through the StallCensus) and aborts every rank.
  [[noreturn]] void abort_stalled(const std::string& what, uint64_t sequence) const;
  void add_exposed(double seconds);
  void count_transfer(int64_t bytes);
  uint64_t issued() const;  // collectives issued so far

 private:
  class Task;
  class Request;
  // Queues a collective for the worker; `call` is what the flight recorder keeps of it.
  std::shared_ptr<Work> enqueue(std::string what, const CommCall& call, std::function<void()> body);
  std::vector<int> world_ranks() const;  // the members' ranks in MPI_COMM_WORLD, in group rank order
  void run_worker();
  // The ring reduce-scatter (on the worker): see reduce_scatter.
  void ring_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op);
  // All-reduce of a large 1-D buffer in place (on the worker): see all_reduce.
  void ring_all_reduce(const Tensor& buffer, ReduceOp op);

  MPI_Comm comm_;
  // A duplicate of comm_ for the ring's own messages, which no send/recv
  // posted on comm_ (pipeline and ring-attention transfers) can match.
  MPI_Comm ring_comm_ = MPI_COMM_NULL;
  double timeout_seconds_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stopping_ = false;
  CommStats stats_;
  uint64_t issued_ = 0;                 // collectives issued so far (under mutex_)
  std::string last_issued_;             // the last one's description
  int recorder_group_ = -1;             // this group in the FlightRecorder
  std::atomic<uint64_t> transfers_{0};  // sends and receives posted so far (numbered apart from collectives)
  // Last: the thread starts once everything it uses is constructed.
  std::thread worker_;
};

}  // namespace titan::comm
