// One rank of a job that is not there: TorchTitan's comm.mode =
// "fake_backend". It reports the rank and size of the job it stands in for,
// and its collectives check their shapes as a real backend would, then return
// at once without communicating: all_gather repeats this rank's part in every
// slot, reduce_scatter keeps this rank's block, all_reduce and broadcast
// leave the tensor as it is, all_to_all with matching splits passes the rows
// through, recv gives zeros. So one process can build its shards, run real
// compute on them and measure its memory and time per step, as rank `rank`
// of `size` would, with communication costing nothing.
//
// Every collective is recorded in the flight recorder (backend "fake") and
// tallied in a ledger the groups split from one world share: what the rank
// would have sent, by group and operation, for the job's report.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "titan/comm/flight_dump.h"
#include "titan/comm/process_group.h"

namespace titan::comm {

class FakeCommLedger {
 public:
  struct Tally {
    int64_t calls = 0;
    int64_t bytes = 0;  // the larger of each call's input and output
  };
  void add(const std::string& group, const CommCall& call);
  // By (group, operation), e.g. ("dp_shard_cp", "all_gather").
  std::map<std::pair<std::string, std::string>, Tally> tallies() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Tally> tallies_;
};

class FakeProcessGroup final : public ProcessGroup {
 public:
  FakeProcessGroup(int rank, int size, std::string name = "world",
                   std::shared_ptr<FakeCommLedger> ledger = std::make_shared<FakeCommLedger>());
  const std::shared_ptr<FakeCommLedger>& ledger() const { return ledger_; }

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> all_to_all(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& tensor, int peer, int tag) override;
  void barrier() override {}
  // A fake group cannot learn its members from the others: only split_axis, which is told them, works.
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;
  std::shared_ptr<ProcessGroup> split_axis(int color, int key, int members, const std::string& name) override;
  CommStats stats() const override { return stats_; }
  void reset_stats() override { stats_ = {}; }
  void set_spans_nodes(bool spans) override;  // and marks the group in the flight recorder

 private:
  std::shared_ptr<FakeCommLedger> ledger_;
  int recorder_group_;
  uint64_t issued_ = 0;
  CommStats stats_;
  std::shared_ptr<Work> issued(const CommCall& call);
};

}  // namespace titan::comm
