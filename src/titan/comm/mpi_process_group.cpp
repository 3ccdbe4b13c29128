#include "titan/comm/mpi_process_group.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

#include "titan/comm/stall_census.h"
#include "titan/core/copy.h"
#include "titan/core/profiler.h"
#include "titan/ops/elementwise.h"

namespace titan::comm {
namespace {

// From this size all_reduce runs titan's ring. Open MPI's default algorithm
// (tuned component, shared memory) matches a ring up to a few MiB and takes
// 30-40x its time at 32 MiB on 2-4 ranks (docs/planning.md): DDP's and
// HSDP's gradient buffers are that large.
constexpr int64_t kRingAllReduceBytes = 16 << 20;

using Clock = std::chrono::steady_clock;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

// Element type for moving bytes; reductions need a real arithmetic type.
MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;
    case DType::u8:
    case DType::f8e4m3:
    case DType::f8e5m2:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

bool reducible(DType dtype) { return dtype == DType::f32 || dtype == DType::i32 || dtype == DType::i64; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

int checked_count(int64_t count, const char* what) {
  TITAN_CHECK(count <= std::numeric_limits<int>::max(), "{}: {} elements exceed MPI's int count", what, count);
  return static_cast<int>(count);
}

void check_cpu(const Tensor& tensor, const char* what) {
  TITAN_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(),
              "{} (mpi backend): needs contiguous CPU tensors, got {} on {}", what, shape_str(tensor.shape()),
              tensor.device().str());
}

}  // namespace

class MpiProcessGroup::Task final : public Work {
 public:
  Task(MpiProcessGroup* group, std::string what, uint64_t sequence, std::function<void()> body)
      : group_(group), what_(std::move(what)), sequence_(sequence), body_(std::move(body)) {}

  // Runs the collective; finish() then releases waiters. Two steps so the
  // worker counts a collective in the stats before anyone waiting on it returns.
  void execute() {
    FlightRecorder::instance().start(record_);
    // The profiler draws it on this group's own track (the worker thread).
    profiler::Span span("comm", comm_op_name(call_.op));
    if (span.recording()) {
      span.args() = {{"group", group_->name()},          {"sequence", sequence_},
                     {"bytes_in", call_.bytes_in},       {"bytes_out", call_.bytes_out},
                     {"dtype", dtype_name(call_.dtype)}, {"what", what_}};
    }
    try {
      body_();
    } catch (...) {
      error_ = std::current_exception();
    }
    // Drop the captured tensors now, before any waiter is released: after the
    // last wait() the program may already be destroying its statics (the CPU
    // allocator among them) while this thread still holds the task.
    body_ = nullptr;
    FlightRecorder::instance().complete(record_);
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    done_changed_.notify_all();
  }

  void wait() override {
    const profiler::Span span("wait", what_);
    const auto start = Clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    const bool finished = done_changed_.wait_for(lock, std::chrono::duration<double>(group_->timeout_seconds()),
                                                 [this] { return done_; });
    if (!finished) group_->abort_stalled(what_, sequence_);
    lock.unlock();
    group_->add_exposed(std::chrono::duration<double>(Clock::now() - start).count());
    if (error_) std::rethrow_exception(error_);
  }

  bool completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

  const std::string& what() const { return what_; }
  int64_t bytes() const { return std::max(call_.bytes_in, call_.bytes_out); }
  void set_record(uint64_t handle, const CommCall& call) {
    record_ = handle;
    call_ = call;
  }

 private:
  MpiProcessGroup* group_;
  std::string what_;
  uint64_t sequence_;    // 1-based number of this collective on the group
  uint64_t record_ = 0;  // its FlightRecorder handle
  CommCall call_;
  std::function<void()> body_;
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::exception_ptr error_;
};

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::string name, double timeout_seconds)
    : ProcessGroup(comm_rank(comm), comm_size(comm), std::move(name)),
      comm_(comm),
      timeout_seconds_(timeout_seconds),
      worker_([this] { run_worker(); }) {
  MPI_Comm_dup(comm_, &ring_comm_);
  recorder_group_ = FlightRecorder::instance().register_group(this->name(), "mpi", world_ranks());
  if (StallCensus* census = stall_census()) {
    census->add_group(this->name(), [this] {
      std::lock_guard<std::mutex> lock(mutex_);
      return GroupProgress{issued_, last_issued_};
    });
  }
}

MpiProcessGroup::~MpiProcessGroup() {
  if (StallCensus* census = stall_census()) census->remove_group(name());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  worker_.join();
  if (ring_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ring_comm_);
  if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

void MpiProcessGroup::run_worker() {
  profiler::set_thread_name(fmt::format("comm: {}", name()));
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = queue_.front();
      queue_.pop_front();
    }
    const auto start = Clock::now();
    task->execute();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Under the same lock as reset_stats: a collective counts whole in one step's figures.
      const bool cross_node = spans_nodes();
      stats_.add_busy(std::chrono::duration<double>(Clock::now() - start).count(), cross_node);
      stats_.count_call(task->bytes(), cross_node);
    }
    task->finish();
  }
}

std::shared_ptr<Work> MpiProcessGroup::enqueue(std::string what, const CommCall& call, std::function<void()> body) {
  std::shared_ptr<Task> task;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_issued_ = what;
    task = std::make_shared<Task>(this, std::move(what), ++issued_, std::move(body));
    // Under the lock: records of one group enter the ring in sequence order.
    task->set_record(FlightRecorder::instance().record(recorder_group_, issued_, call), call);
    queue_.push_back(task);
  }
  ready_.notify_one();
  return task;
}

std::vector<int> MpiProcessGroup::world_ranks() const {
  MPI_Group group, world;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> members, ranks(static_cast<size_t>(size()));
  for (int r = 0; r < size(); ++r) members.push_back(r);
  MPI_Group_translate_ranks(group, size(), members.data(), world, ranks.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return ranks;
}

void MpiProcessGroup::abort_stalled(const std::string& what, uint64_t sequence) const {
  // First, while this rank's view is intact: the dump outlives the abort.
  FlightRecorder::instance().dump(fmt::format("{} (collective #{} on group '{}') timed out after {:.0f} s", what,
                                              sequence, name(), timeout_seconds_),
                                  /*final=*/true);
  std::string peers;
  if (StallCensus* census = stall_census()) {
    // The group's other ranks, as world ranks (the census talks over the world).
    std::vector<int> world_ranks = this->world_ranks();
    world_ranks.erase(world_ranks.begin() + rank());
    for (const std::string& line : census->ask(world_ranks, name(), sequence, 5.0)) peers += "\n  " + line;
  }
  std::fprintf(stderr,
               "titan: rank %d: %s (collective #%llu on group '%s') did not complete within %.0f s "
               "(comm.timeout_seconds): a peer rank died or stalled; aborting every rank%s\n",
               world_rank(), what.c_str(), static_cast<unsigned long long>(sequence), name().c_str(), timeout_seconds_,
               peers.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

void MpiProcessGroup::add_exposed(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.exposed_seconds += seconds;
}

CommStats MpiProcessGroup::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void MpiProcessGroup::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = {};
}

std::shared_ptr<Work> MpiProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_cpu(tensor, "all_reduce");
  check_reduce_op(*this, "all_reduce", tensor.dtype(), op);
  // MPI has no 16-bit float arithmetic: reduce a widened copy.
  const bool widen = !reducible(tensor.dtype());
  TITAN_CHECK(!widen || is_floating(tensor.dtype()), "all_reduce of a {} tensor", dtype_name(tensor.dtype()));
  const Tensor buffer = widen ? tensor.to(DType::f32) : tensor;
  const int count = checked_count(tensor.numel(), "all_reduce");
  return enqueue(
      fmt::format("all_reduce({}) of {} {}", reduce_op_name(op), shape_str(tensor.shape()), dtype_name(tensor.dtype())),
      describe_call(CommOp::all_reduce, tensor, tensor, static_cast<int>(op)), [=, this] {
        if (buffer.nbytes() >= kRingAllReduceBytes && buffer.numel() >= size()) {
          ring_all_reduce(buffer.view({-1}), op);
        } else {
          MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr(), count, mpi_type(buffer.dtype()), mpi_op(op), comm_);
        }
        if (op == ReduceOp::avg) ops::scale_(buffer, 1.0f / static_cast<float>(size()));
        if (widen) titan::copy_(tensor, buffer);
      });
}

std::shared_ptr<Work> MpiProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_cpu(output, "all_gather");
  check_cpu(input, "all_gather");
  check_all_gather(*this, output, input);
  const int count = checked_count(input.numel(), "all_gather");
  return enqueue(fmt::format("all_gather of {} {}", shape_str(input.shape()), dtype_name(input.dtype())),
                 describe_call(CommOp::all_gather, input, output), [=, this] {
                   const MPI_Datatype type = mpi_type(input.dtype());
                   MPI_Allgather(input.data_ptr(), count, type, output.data_ptr(), count, type, comm_);
                 });
}

namespace {

// into[i] = a[i] (op) b[i] for the ring's partial sums.
template <typename T>
void combine(T* into, const T* a, const T* b, int64_t count, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < count; ++i) into[i] = std::max(a[i], b[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) into[i] = a[i] + b[i];
  }
}

void combine(const Tensor& into, const Tensor& a, const Tensor& b, ReduceOp op) {
  switch (a.dtype()) {
    case DType::f32:
      return combine(into.data<float>(), a.data<float>(), b.data<float>(), a.numel(), op);
    case DType::i32:
      return combine(into.data<int32_t>(), a.data<int32_t>(), b.data<int32_t>(), a.numel(), op);
    case DType::i64:
      return combine(into.data<int64_t>(), a.data<int64_t>(), b.data<int64_t>(), a.numel(), op);
    default:
      fail("reduce_scatter: cannot reduce {} tensors", dtype_name(a.dtype()));
  }
}

}  // namespace

// A ring: in step s each rank passes the partial result of one block to the
// next rank, which adds its own part; after size() - 1 steps rank r holds
// block r whole. Memory beyond the output is two blocks (what goes out and
// what comes in). MPI_Reduce_scatter_block's algorithms take a temporary of
// the whole input (Open MPI's default reduces it onto rank 0 first): an FSDP
// unit's f32 gradient more, on a rank whose peak is backward's.
void MpiProcessGroup::ring_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  const int world = size(), me = rank();
  const int64_t count = output.numel();
  const auto block = [&](int index) { return input.narrow(0, ((index % world + world) % world) * count, count); };
  if (world == 1) {
    titan::copy_(output, block(0));
    return;
  }
  const int next = (me + 1) % world, previous = (me + world - 1) % world;
  const MPI_Datatype type = mpi_type(input.dtype());
  const int n = checked_count(count, "reduce_scatter");
  Tensor outgoing = block(me - 1).clone();
  Tensor incoming = Tensor::empty({count}, input.dtype());
  for (int step = 0; step < world - 1; ++step) {
    MPI_Sendrecv(outgoing.data_ptr(), n, type, next, step, incoming.data_ptr(), n, type, previous, step, ring_comm_,
                 MPI_STATUS_IGNORE);
    // incoming: the partial of block me - step - 2, to which this rank adds its own part.
    const bool last = step == world - 2;
    combine(last ? output : outgoing, block(me - step - 2), incoming, op);
  }
}

// The ring reduce-scatter, then an in-place all-gather of the reduced blocks:
// every element is summed once, on one rank, so all ranks hold the same bits.
// A tensor that does not split evenly is reduced through a padded copy.
void MpiProcessGroup::ring_all_reduce(const Tensor& buffer, ReduceOp op) {
  const int world = size();
  const int64_t block = (buffer.numel() + world - 1) / world;
  const bool padded = block * world != buffer.numel();
  Tensor whole = buffer;
  if (padded) {
    whole = Tensor::zeros({block * world}, buffer.dtype());
    titan::copy_(whole.narrow(0, 0, buffer.numel()), buffer);
  }
  Tensor mine = Tensor::empty({block}, buffer.dtype());
  ring_reduce_scatter(whole, mine, op);
  titan::copy_(whole.narrow(0, rank() * block, block), mine);
  const MPI_Datatype type = mpi_type(buffer.dtype());
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, whole.data_ptr(), checked_count(block, "all_reduce"), type, comm_);
  if (padded) titan::copy_(buffer, whole.narrow(0, 0, buffer.numel()));
}

std::shared_ptr<Work> MpiProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_cpu(output, "reduce_scatter");
  check_cpu(input, "reduce_scatter");
  check_reduce_scatter(*this, output, input);
  check_reduce_op(*this, "reduce_scatter", input.dtype(), op);
  const bool widen = !reducible(input.dtype());
  TITAN_CHECK(!widen || is_floating(input.dtype()), "reduce_scatter of a {} tensor", dtype_name(input.dtype()));
  const Tensor send = widen ? input.to(DType::f32) : input;
  const Tensor receive = widen ? Tensor::empty(output.shape(), DType::f32) : output;
  checked_count(output.numel(), "reduce_scatter");
  return enqueue(fmt::format("reduce_scatter({}) of {} {}", reduce_op_name(op), shape_str(input.shape()),
                             dtype_name(input.dtype())),
                 describe_call(CommOp::reduce_scatter, input, output, static_cast<int>(op)), [=, this] {
                   ring_reduce_scatter(send.view({-1}), receive.view({-1}), op);
                   if (op == ReduceOp::avg) ops::scale_(receive, 1.0f / static_cast<float>(size()));
                   if (widen) titan::copy_(output, receive);
                 });
}

std::shared_ptr<Work> MpiProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_cpu(tensor, "broadcast");
  TITAN_CHECK(root >= 0 && root < size(), "broadcast on {}: root {} outside [0, {})", name(), root, size());
  const int count = checked_count(tensor.numel(), "broadcast");
  return enqueue(fmt::format("broadcast from {} of {} {}", root, shape_str(tensor.shape()), dtype_name(tensor.dtype())),
                 describe_call(CommOp::broadcast, tensor, tensor, -1, root),
                 [=, this] { MPI_Bcast(tensor.data_ptr(), count, mpi_type(tensor.dtype()), root, comm_); });
}

std::shared_ptr<Work> MpiProcessGroup::all_to_all(const Tensor& output, const Tensor& input,
                                                  const std::vector<int64_t>& output_splits,
                                                  const std::vector<int64_t>& input_splits) {
  check_cpu(output, "all_to_all");
  check_cpu(input, "all_to_all");
  const int64_t row = check_all_to_all(*this, output, input, output_splits, input_splits);
  std::vector<int> send_counts, send_offsets, receive_counts, receive_offsets;
  int64_t send_offset = 0, receive_offset = 0;
  for (int p = 0; p < size(); ++p) {
    send_counts.push_back(checked_count(input_splits[p] * row, "all_to_all"));
    send_offsets.push_back(checked_count(send_offset, "all_to_all"));
    send_offset += input_splits[p] * row;
    receive_counts.push_back(checked_count(output_splits[p] * row, "all_to_all"));
    receive_offsets.push_back(checked_count(receive_offset, "all_to_all"));
    receive_offset += output_splits[p] * row;
  }
  return enqueue(fmt::format("all_to_all of {} {}", shape_str(input.shape()), dtype_name(input.dtype())),
                 describe_call(CommOp::all_to_all, input, output), [=, this] {
                   const MPI_Datatype type = mpi_type(input.dtype());
                   MPI_Alltoallv(input.data_ptr(), send_counts.data(), send_offsets.data(), type, output.data_ptr(),
                                 receive_counts.data(), receive_offsets.data(), type, comm_);
                 });
}

// A posted non-blocking send or receive. Point-to-point bypasses the worker:
// pipeline schedules post receives early and in any order relative to sends,
// which a worker running one blocking operation at a time would deadlock on.
class MpiProcessGroup::Request final : public Work {
 public:
  // `record`: its FlightRecorder handle; posted to MPI is started.
  Request(MpiProcessGroup* group, std::string what, Tensor tensor, MPI_Request request, uint64_t record)
      : group_(group), what_(std::move(what)), tensor_(std::move(tensor)), request_(request), record_(record) {
    FlightRecorder::instance().start(record_);
  }
  ~Request() override {
    // A request nobody waited for still owns its buffer until it completes.
    if (!done_) {
      MPI_Wait(&request_, MPI_STATUS_IGNORE);
      FlightRecorder::instance().complete(record_);
    }
  }

  void wait() override {
    const profiler::Span span("wait", what_);
    const auto start = Clock::now();
    for (int polls = 0; !completed(); ++polls) {
      if (std::chrono::duration<double>(Clock::now() - start).count() > group_->timeout_seconds()) {
        group_->abort_stalled(what_, group_->issued());
      }
      // Poll hot briefly (a transfer about to land), then sleep between polls:
      // a pipeline rank waiting out its bubble must not take the cores of the
      // ranks computing (more ranks than cores is common on one machine).
      if (polls < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    group_->add_exposed(std::chrono::duration<double>(Clock::now() - start).count());
  }

  bool completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      int flag = 0;
      MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
      if (flag) {
        done_ = true;
        FlightRecorder::instance().complete(record_);
        group_->count_transfer(static_cast<int64_t>(tensor_.nbytes()));
      }
    }
    return done_;
  }

 private:
  MpiProcessGroup* group_;
  std::string what_;
  Tensor tensor_;  // kept alive until MPI is done with its memory
  MPI_Request request_;
  uint64_t record_;
  std::mutex mutex_;
  bool done_ = false;
};

std::shared_ptr<Work> MpiProcessGroup::send(const Tensor& tensor, int peer, int tag) {
  check_cpu(tensor, "send");
  const int count = checked_count(tensor.numel(), "send");
  MPI_Request request;
  const uint64_t record = FlightRecorder::instance().record(recorder_group_, ++transfers_,
                                                            describe_call(CommOp::send, tensor, tensor, -1, peer));
  MPI_Isend(tensor.data_ptr(), count, mpi_type(tensor.dtype()), peer, tag, comm_, &request);
  return std::make_shared<Request>(this, fmt::format("send to {} of {} (tag {})", peer, shape_str(tensor.shape()), tag),
                                   tensor, request, record);
}

std::shared_ptr<Work> MpiProcessGroup::recv(const Tensor& tensor, int peer, int tag) {
  check_cpu(tensor, "recv");
  const int count = checked_count(tensor.numel(), "recv");
  MPI_Request request;
  const uint64_t record = FlightRecorder::instance().record(recorder_group_, ++transfers_,
                                                            describe_call(CommOp::recv, tensor, tensor, -1, peer));
  MPI_Irecv(tensor.data_ptr(), count, mpi_type(tensor.dtype()), peer, tag, comm_, &request);
  return std::make_shared<Request>(
      this, fmt::format("recv from {} of {} (tag {})", peer, shape_str(tensor.shape()), tag), tensor, request, record);
}

uint64_t MpiProcessGroup::issued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return issued_;
}

// Transfers overlap each other and compute, so they add no busy time (which
// would exceed the step's); waiting for them is counted as exposed.
void MpiProcessGroup::count_transfer(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.count_call(bytes, spans_nodes());
}

void MpiProcessGroup::set_spans_nodes(bool spans) {
  ProcessGroup::set_spans_nodes(spans);
  FlightRecorder::instance().set_spans_nodes(recorder_group_, spans);
}

void MpiProcessGroup::barrier() {
  enqueue("barrier", CommCall{CommOp::barrier}, [this] { MPI_Barrier(comm_); })->wait();
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::split(int color, int key, const std::string& name) {
  MPI_Comm sub = MPI_COMM_NULL;
  enqueue(fmt::format("split into '{}'", name), CommCall{CommOp::split}, [&, this] {
    MPI_Comm_split(comm_, color, key, &sub);
  })->wait();
  return std::make_shared<MpiProcessGroup>(sub, name, timeout_seconds_);
}

}  // namespace titan::comm
