// A group of one process: every collective is a local copy (or nothing). It
// lets a job started without a launcher run the same code paths as a
// distributed one.
#pragma once

#include "titan/comm/process_group.h"

namespace titan::comm {

class LocalProcessGroup final : public ProcessGroup {
 public:
  explicit LocalProcessGroup(std::string name = "world") : ProcessGroup(0, 1, std::move(name)) {}

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> all_to_all(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& tensor, int peer, int tag) override;
  void barrier() override {}
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;
  CommStats stats() const override { return {}; }
  void reset_stats() override {}
};

}  // namespace titan::comm
