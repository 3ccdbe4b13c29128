#include "titan/comm/local_process_group.h"

#include "titan/core/copy.h"

namespace titan::comm {
std::shared_ptr<Work> LocalProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_reduce_op(*this, "all_reduce", tensor.dtype(), op);
  return completed_work();
}

std::shared_ptr<Work> LocalProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_all_gather(*this, output, input);
  titan::copy_(output.view(input.shape()), input);
  return completed_work();
}

std::shared_ptr<Work> LocalProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(*this, output, input);
  check_reduce_op(*this, "reduce_scatter", input.dtype(), op);
  titan::copy_(output, input.view(output.shape()));
  return completed_work();
}

std::shared_ptr<Work> LocalProcessGroup::broadcast(const Tensor&, int root) {
  TITAN_CHECK(root == 0, "broadcast on a group of one: root {} is not 0", root);
  return completed_work();
}

std::shared_ptr<Work> LocalProcessGroup::all_to_all(const Tensor& output, const Tensor& input,
                                                    const std::vector<int64_t>& output_splits,
                                                    const std::vector<int64_t>& input_splits) {
  check_all_to_all(*this, output, input, output_splits, input_splits);
  titan::copy_(output, input);
  return completed_work();
}

std::shared_ptr<Work> LocalProcessGroup::send(const Tensor&, int peer, int) {
  fail("send to rank {} in a group of one", peer);
}

std::shared_ptr<Work> LocalProcessGroup::recv(const Tensor&, int peer, int) {
  fail("recv from rank {} in a group of one", peer);
}

std::shared_ptr<ProcessGroup> LocalProcessGroup::split(int, int, const std::string& name) {
  return std::make_shared<LocalProcessGroup>(name);
}

}  // namespace titan::comm
