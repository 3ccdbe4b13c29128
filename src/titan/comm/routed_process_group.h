// One process group over two backends, chosen per call by where the tensor
// lives: device tensors go to the device backend (NCCL), host tensors to the
// host one (MPI). Training on GPUs moves parameters and gradients through
// NCCL while the trainer's small host-side agreements (preemption flags,
// validation totals, the loss average) keep using MPI, with no code deciding
// which group to call.
#pragma once

#include <memory>

#include "titan/comm/process_group.h"

namespace titan::comm {

class RoutedProcessGroup final : public ProcessGroup {
 public:
  // Both groups span the same ranks in the same order.
  RoutedProcessGroup(std::shared_ptr<ProcessGroup> host, std::shared_ptr<ProcessGroup> device);

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> all_to_all(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& tensor, int peer, int tag) override;
  // On the host group: a barrier orders processes, not device work.
  void barrier() override;
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override;
  // Both backends' time, added.
  CommStats stats() const override;
  void reset_stats() override;
  void set_spans_nodes(bool spans) override;  // marks both backends' groups alike

 private:
  ProcessGroup& route(const Tensor& tensor) const;

  std::shared_ptr<ProcessGroup> host_, device_;
};

}  // namespace titan::comm
