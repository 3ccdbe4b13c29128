#include "titan/comm/fake_process_group.h"

#include <algorithm>

#include "titan/comm/flight_recorder.h"
#include "titan/core/copy.h"

namespace titan::comm {
namespace {

void check_fake_peer(const ProcessGroup& group, const char* what, int peer) {
  TITAN_CHECK(peer >= 0 && peer < group.size() && peer != group.rank(),
              "{} on group {}: peer {} of {} ranks (this is {})", what, group.name(), peer, group.size(), group.rank());
}

// The data is in place when issued, but the work reports itself in flight
// until waited on, as a real collective overlapping compute would: FSDP then
// keeps a reduce-scatter's bucket alive until the next one starts, and the
// rehearsal's memory is a real rank's.
class InFlightWork : public Work {
 public:
  void wait() override { waited_ = true; }
  bool completed() override { return waited_; }

 private:
  bool waited_ = false;
};

}  // namespace

void FakeCommLedger::add(const std::string& group, const CommCall& call) {
  std::lock_guard<std::mutex> lock(mutex_);
  Tally& tally = tallies_[{group, comm_op_name(call.op)}];
  ++tally.calls;
  tally.bytes += std::max(call.bytes_in, call.bytes_out);
}

std::map<std::pair<std::string, std::string>, FakeCommLedger::Tally> FakeCommLedger::tallies() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tallies_;
}

void FakeCommLedger::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  tallies_.clear();
}

FakeProcessGroup::FakeProcessGroup(int rank, int size, std::string name, std::shared_ptr<FakeCommLedger> ledger)
    : ProcessGroup(rank, size, std::move(name)), ledger_(std::move(ledger)) {
  TITAN_CHECK(size >= 1 && rank >= 0 && rank < size, "fake process group {}: rank {} of {} ranks", this->name(), rank,
              size);
  // The members' world ranks are not known here: the group is registered with none.
  recorder_group_ = FlightRecorder::instance().register_group(this->name(), "fake", {});
}

std::shared_ptr<Work> FakeProcessGroup::issued(const CommCall& call) {
  stats_.count_call(std::max(call.bytes_in, call.bytes_out), spans_nodes());
  ledger_->add(name(), call);
  FlightRecorder& recorder = FlightRecorder::instance();
  const uint64_t record = recorder.record(recorder_group_, ++issued_, call);
  recorder.start(record);
  recorder.complete(record);
  return std::make_shared<InFlightWork>();
}

std::shared_ptr<Work> FakeProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_reduce_op(*this, "all_reduce", tensor.dtype(), op);
  return issued(describe_call(CommOp::all_reduce, tensor, tensor, static_cast<int>(op)));
}

std::shared_ptr<Work> FakeProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_all_gather(*this, output, input);
  const Tensor slots = output.view({size(), input.numel()});
  for (int r = 0; r < size(); ++r) titan::copy_(slots.select(0, r), input.view({-1}));
  return issued(describe_call(CommOp::all_gather, input, output));
}

std::shared_ptr<Work> FakeProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(*this, output, input);
  check_reduce_op(*this, "reduce_scatter", input.dtype(), op);
  titan::copy_(output.view({-1}), input.view({size(), output.numel()}).select(0, rank()));
  return issued(describe_call(CommOp::reduce_scatter, input, output, static_cast<int>(op)));
}

std::shared_ptr<Work> FakeProcessGroup::broadcast(const Tensor& tensor, int root) {
  TITAN_CHECK(root >= 0 && root < size(), "broadcast on group {}: root {} of {} ranks", name(), root, size());
  return issued(describe_call(CommOp::broadcast, tensor, tensor, -1, root));
}

std::shared_ptr<Work> FakeProcessGroup::all_to_all(const Tensor& output, const Tensor& input,
                                                   const std::vector<int64_t>& output_splits,
                                                   const std::vector<int64_t>& input_splits) {
  check_all_to_all(*this, output, input, output_splits, input_splits);
  // Every peer is taken to send what it was sent, so matching splits pass the rows through.
  if (output_splits == input_splits) {
    titan::copy_(output, input);
  } else {
    titan::fill_(output, 0.0);
  }
  return issued(describe_call(CommOp::all_to_all, input, output));
}

std::shared_ptr<Work> FakeProcessGroup::send(const Tensor& tensor, int peer, int) {
  check_fake_peer(*this, "send", peer);
  return issued(describe_call(CommOp::send, tensor, tensor, -1, peer));
}

std::shared_ptr<Work> FakeProcessGroup::recv(const Tensor& tensor, int peer, int) {
  check_fake_peer(*this, "recv", peer);
  titan::fill_(tensor, 0.0);
  return issued(describe_call(CommOp::recv, tensor, tensor, -1, peer));
}

void FakeProcessGroup::set_spans_nodes(bool spans) {
  ProcessGroup::set_spans_nodes(spans);
  FlightRecorder::instance().set_spans_nodes(recorder_group_, spans);
}

std::shared_ptr<ProcessGroup> FakeProcessGroup::split(int, int, const std::string& name) {
  fail("fake process group {}: split into {} needs its member count (split_axis)", this->name(), name);
}

std::shared_ptr<ProcessGroup> FakeProcessGroup::split_axis(int, int key, int members, const std::string& name) {
  return std::make_shared<FakeProcessGroup>(key, members, name, ledger_);
}

}  // namespace titan::comm
