// A process group over Gloo's TCP transport (Debian's libgloo-dev): the
// cross-replica-group collectives of fault tolerance (fault_tolerance.process_group
// = "gloo", train/fault_tolerance.h). Unlike MPI's world, it is built for one
// quorum's members and rebuilt when they change; a member that dies makes
// the next collective throw GlooPeerLost (a closed connection at once, a hung
// peer after the timeout) instead of ending the job.
//
// Host (CPU) tensors only; collectives run synchronously (their Work is
// already complete). all_reduce (sum, avg, max over f32, i32, i64),
// broadcast, send/recv and barrier; the rest are not needed by fault
// tolerance and say so.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "titan/comm/process_group.h"
#include "titan/core/error.h"
#include "titan/core/units.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace titan::comm {

// A collective failed because a member is gone or timed out: the caller may re-form its quorum.
class GlooPeerLost : public Error {
 public:
  using Error::Error;
};

class GlooProcessGroup : public ProcessGroup {
 public:
  // Rendezvous of `size` members through `store` (each passes its own rank);
  // waits at most `timeout` for the others, which is also each collective's limit.
  GlooProcessGroup(gloo::rendezvous::Store& store, int rank, int size, std::chrono::milliseconds timeout,
                   std::string name);
  ~GlooProcessGroup() override;

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
  CommStats stats() const override { return stats_; }
  void reset_stats() override { stats_ = {}; }

 private:
  void check_host(const Tensor& tensor, const char* what) const;
  void record(const Tensor& tensor, SteadyClock::time_point start);
  [[noreturn]] void lost(const char* what, const std::exception& error) const;

  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
  uint32_t tag_ = 0;
  CommStats stats_;
};

}  // namespace titan::comm
