#include "titan/comm/routed_process_group.h"

#include "titan/core/error.h"

namespace titan::comm {

RoutedProcessGroup::RoutedProcessGroup(std::shared_ptr<ProcessGroup> host, std::shared_ptr<ProcessGroup> device)
    : ProcessGroup(host->rank(), host->size(), host->name()), host_(std::move(host)), device_(std::move(device)) {
  TITAN_CHECK(host_->rank() == device_->rank() && host_->size() == device_->size(),
              "routed group '{}': host group is rank {} of {}, device group '{}' rank {} of {}", host_->name(),
              host_->rank(), host_->size(), device_->name(), device_->rank(), device_->size());
}

ProcessGroup& RoutedProcessGroup::route(const Tensor& tensor) const {
  return tensor.device().is_cpu() ? *host_ : *device_;
}

std::shared_ptr<Work> RoutedProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  return route(tensor).all_reduce(tensor, op);
}

std::shared_ptr<Work> RoutedProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  return route(input).all_gather(output, input);
}

std::shared_ptr<Work> RoutedProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  return route(input).reduce_scatter(output, input, op);
}

std::shared_ptr<Work> RoutedProcessGroup::broadcast(const Tensor& tensor, int root) {
  return route(tensor).broadcast(tensor, root);
}

std::shared_ptr<Work> RoutedProcessGroup::all_to_all(const Tensor& output, const Tensor& input,
                                                     const std::vector<int64_t>& output_splits,
                                                     const std::vector<int64_t>& input_splits) {
  return route(input).all_to_all(output, input, output_splits, input_splits);
}

std::shared_ptr<Work> RoutedProcessGroup::send(const Tensor& tensor, int peer, int tag) {
  return route(tensor).send(tensor, peer, tag);
}

std::shared_ptr<Work> RoutedProcessGroup::recv(const Tensor& tensor, int peer, int tag) {
  return route(tensor).recv(tensor, peer, tag);
}

void RoutedProcessGroup::barrier() { host_->barrier(); }

std::shared_ptr<ProcessGroup> RoutedProcessGroup::split(int color, int key, const std::string& name) {
  return std::make_shared<RoutedProcessGroup>(host_->split(color, key, name), device_->split(color, key, name));
}

CommStats RoutedProcessGroup::stats() const {
  CommStats total = host_->stats();
  total += device_->stats();
  return total;
}

void RoutedProcessGroup::set_spans_nodes(bool spans) {
  ProcessGroup::set_spans_nodes(spans);
  host_->set_spans_nodes(spans);
  device_->set_spans_nodes(spans);
}

void RoutedProcessGroup::reset_stats() {
  host_->reset_stats();
  device_->reset_stats();
}

}  // namespace titan::comm
