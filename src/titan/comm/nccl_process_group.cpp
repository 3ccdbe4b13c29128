// The `nccl` backend (see nccl_process_group.h).
//
// NOT YET RUN ON A GPU. This file was written from NCCL's header (2.28) and
// its public documentation on a machine without a GPU. It is compiled and
// linked with -Werror in every CUDA build, and the "no device" error path is
// tested, but no collective here has ever executed. Run the distributed tests
// on a GPU machine before relying on it.
//
// Each group owns one non-blocking, high-priority CUDA stream. A collective
// first makes that stream wait on an event recorded on the calling thread's
// current stream (where titan's CUDA kernels run, ops/cuda/stream.h), so it
// sees every write issued before it, and is bracketed
// by two timing events. Work::wait() polls the end event from the host rather
// than blocking in the driver, so it can honour the group's timeout and
// NCCL's asynchronous errors: a collective that never finishes ends the job
// with a message, as in the mpi backend. The group keeps each collective's
// tensors alive until it has finished, so callers may drop them (or the Work).
#include "titan/comm/nccl_process_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "titan/comm/flight_recorder.h"
#include "titan/comm/world.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

#define TITAN_NCCL_CHECK(call)                                                                                 \
  do {                                                                                                         \
    const ncclResult_t titan_nccl_status = (call);                                                             \
    if (titan_nccl_status != ncclSuccess) {                                                                    \
      ::titan::fail("NCCL call {} failed: {} ({}:{})", #call, ncclGetErrorString(titan_nccl_status), __FILE__, \
                    __LINE__);                                                                                 \
    }                                                                                                          \
  } while (0)

namespace titan::comm {
namespace {

using Clock = std::chrono::steady_clock;

// The NCCL type moving a dtype's bits; fp8 moves as bytes (never reduced).
ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
    case DType::f8e4m3:
    case DType::f8e5m2:
      return ncclUint8;
  }
  return ncclUint8;
}

// NCCL reduces these natively (bf16 and f16 too, unlike MPI), so nothing is widened.
bool nccl_reducible(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::i32 ||
         dtype == DType::i64;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

int comm_user_rank(ncclComm_t comm) {
  int rank = 0;
  TITAN_NCCL_CHECK(ncclCommUserRank(comm, &rank));
  return rank;
}

int comm_count(ncclComm_t comm) {
  int count = 0;
  TITAN_NCCL_CHECK(ncclCommCount(comm, &count));
  return count;
}

// One issued collective: its events and the tensors it reads or writes.
struct InFlight {
  std::string what;
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  std::vector<Tensor> tensors;
  bool accounted = false;                             // its busy time is in the stats
  bool cross_node = false;                            // issued while the group spanned nodes
  uint64_t record = 0;                                // its FlightRecorder handle
  bool started_seen = false, completed_seen = false;  // what the recorder has been told

  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    if (start != nullptr) cudaEventDestroy(start);
    if (end != nullptr) cudaEventDestroy(end);
  }
};

class NcclProcessGroup;

class NcclWork final : public Work {
 public:
  NcclWork(NcclProcessGroup* group, std::shared_ptr<InFlight> op) : group_(group), op_(std::move(op)) {}
  void wait() override;
  bool completed() override;

 private:
  NcclProcessGroup* group_;
  std::shared_ptr<InFlight> op_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Takes ownership of `comm`. `bootstrap` (may be null) is the CPU group over
  // the same ranks, needed only where NCCL cannot split a communicator itself.
  NcclProcessGroup(ncclComm_t comm, int device, std::string name, double timeout_seconds,
                   std::shared_ptr<ProcessGroup> bootstrap)
      : ProcessGroup(comm_user_rank(comm), comm_count(comm), std::move(name)),
        comm_(comm),
        device_(device),
        timeout_seconds_(timeout_seconds),
        bootstrap_(std::move(bootstrap)) {
    try {
      TITAN_CUDA_CHECK(cudaSetDevice(device_));
      // Collectives gate other ranks' progress: let them overtake compute kernels.
      int least = 0, greatest = 0;
      TITAN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      TITAN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
      TITAN_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
      barrier_buffer_ = Tensor::zeros({1}, DType::f32, Device::cuda(device_));
      recorder_group_ = FlightRecorder::instance().register_group(this->name(), "nccl", gather_world_ranks());
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclProcessGroup() override {
    // Collectives are issued on every rank alike, so those in flight finish
    // (if a peer died instead, a waiting Work or the launcher ends the job).
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    release();
  }

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce");
    check_reduce_op(*this, "all_reduce", tensor.dtype(), op);
    check_reducible(tensor.dtype(), "all_reduce");
    return launch(fmt::format("all_reduce({}) of {} {}", reduce_op_name(op), shape_str(tensor.shape()),
                              dtype_name(tensor.dtype())),
                  {tensor}, describe_call(CommOp::all_reduce, tensor, tensor, static_cast<int>(op)), [&] {
                    TITAN_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), count(tensor),
                                                   nccl_type(tensor.dtype()), nccl_op(op), comm_, stream_));
                  });
  }

  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    check_tensor(output, "all_gather");
    check_tensor(input, "all_gather");
    check_all_gather(*this, output, input);
    return launch(fmt::format("all_gather of {} {}", shape_str(input.shape()), dtype_name(input.dtype())),
                  {output, input}, describe_call(CommOp::all_gather, input, output), [&] {
                    TITAN_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), count(input),
                                                   nccl_type(input.dtype()), comm_, stream_));
                  });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    check_tensor(output, "reduce_scatter");
    check_tensor(input, "reduce_scatter");
    check_reduce_scatter(*this, output, input);
    check_reduce_op(*this, "reduce_scatter", input.dtype(), op);
    check_reducible(input.dtype(), "reduce_scatter");
    return launch(fmt::format("reduce_scatter({}) of {} {}", reduce_op_name(op), shape_str(input.shape()),
                              dtype_name(input.dtype())),
                  {output, input}, describe_call(CommOp::reduce_scatter, input, output, static_cast<int>(op)), [&] {
                    TITAN_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), count(output),
                                                       nccl_type(input.dtype()), nccl_op(op), comm_, stream_));
                  });
  }

  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override {
    check_tensor(tensor, "broadcast");
    TITAN_CHECK(root >= 0 && root < size(), "broadcast on {}: root {} outside [0, {})", name(), root, size());
    return launch(
        fmt::format("broadcast from {} of {} {}", root, shape_str(tensor.shape()), dtype_name(tensor.dtype())),
        {tensor}, describe_call(CommOp::broadcast, tensor, tensor, -1, root), [&] {
          TITAN_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), count(tensor), nccl_type(tensor.dtype()),
                                         root, comm_, stream_));
        });
  }

  std::shared_ptr<Work> all_to_all(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits) override {
    check_tensor(output, "all_to_all");
    check_tensor(input, "all_to_all");
    const int64_t row = check_all_to_all(*this, output, input, output_splits, input_splits);
    const int64_t row_bytes = row * static_cast<int64_t>(input.element_size());
    const ncclDataType_t type = nccl_type(input.dtype());
    return launch(fmt::format("all_to_all of {} {}", shape_str(input.shape()), dtype_name(input.dtype())),
                  {output, input}, describe_call(CommOp::all_to_all, input, output), [&] {
                    // One group call: every send and receive progresses together,
                    // which is what lets rank pairs exchange without deadlock.
                    TITAN_NCCL_CHECK(ncclGroupStart());
                    ncclResult_t first_error = ncclSuccess;
                    const auto keep = [&](ncclResult_t result) {
                      if (first_error == ncclSuccess) first_error = result;
                    };
                    auto* send = static_cast<const char*>(input.data_ptr());
                    auto* receive = static_cast<char*>(output.data_ptr());
                    for (int peer = 0; peer < size(); ++peer) {
                      const int64_t sent = input_splits[peer], received = output_splits[peer];
                      if (sent > 0) keep(ncclSend(send, static_cast<size_t>(sent * row), type, peer, comm_, stream_));
                      if (received > 0) {
                        keep(ncclRecv(receive, static_cast<size_t>(received * row), type, peer, comm_, stream_));
                      }
                      send += sent * row_bytes;
                      receive += received * row_bytes;
                    }
                    keep(ncclGroupEnd());
                    TITAN_NCCL_CHECK(first_error);
                  });
  }

  // NCCL has no tags: sends and receives between two ranks match in the order
  // they are issued, so `tag` only names the transfer in messages.
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, int tag) override {
    check_tensor(tensor, "send");
    check_peer(peer, "send");
    return launch(
        fmt::format("send to {} (tag {}) of {}", peer, tag, shape_str(tensor.shape())), {tensor},
        describe_call(CommOp::send, tensor, tensor, -1, peer), [&] {
          TITAN_NCCL_CHECK(ncclSend(tensor.data_ptr(), count(tensor), nccl_type(tensor.dtype()), peer, comm_, stream_));
        });
  }

  std::shared_ptr<Work> recv(const Tensor& tensor, int peer, int tag) override {
    check_tensor(tensor, "recv");
    check_peer(peer, "recv");
    return launch(
        fmt::format("recv from {} (tag {}) of {}", peer, tag, shape_str(tensor.shape())), {tensor},
        describe_call(CommOp::recv, tensor, tensor, -1, peer), [&] {
          TITAN_NCCL_CHECK(ncclRecv(tensor.data_ptr(), count(tensor), nccl_type(tensor.dtype()), peer, comm_, stream_));
        });
  }

  // NCCL has no barrier; a one-element all_reduce that every rank waits for is one.
  void barrier() override {
    launch("barrier", {barrier_buffer_}, CommCall{CommOp::barrier}, [&] {
      TITAN_NCCL_CHECK(ncclAllReduce(barrier_buffer_.data_ptr(), barrier_buffer_.data_ptr(), 1, ncclFloat32, ncclSum,
                                     comm_, stream_));
    })->wait();
  }

  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    TITAN_CHECK(color >= 0, "split of {} into '{}': color {} must be >= 0", this->name(), name, color);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    ncclComm_t sub = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // A collective over this group, issued from the host (not on the stream):
      // recorded like the others, started and completed around the call.
      FlightRecorder& recorder = FlightRecorder::instance();
      const uint64_t record = recorder.record(recorder_group_, ++issued_, CommCall{CommOp::split});
      recorder.start(record);
      TITAN_CUDA_CHECK(cudaSetDevice(device_));
      TITAN_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
      recorder.complete(record);
    }
    return std::make_shared<NcclProcessGroup>(sub, device_, name, timeout_seconds_, nullptr);
#else
    // No ncclCommSplit: split the CPU group alike and bootstrap a fresh communicator over each part.
    TITAN_CHECK(bootstrap_ != nullptr, "split of {} into '{}': no CPU group to bootstrap the sub-group over",
                this->name(), name);
    return make_nccl_process_group(bootstrap_->split(color, key, name), device_, name, timeout_seconds_);
#endif
  }

  CommStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_ = {};
  }

  void set_spans_nodes(bool spans) override {
    ProcessGroup::set_spans_nodes(spans);
    FlightRecorder::instance().set_spans_nodes(recorder_group_, spans);
  }

  // Blocks until `op` finished; past the timeout, or on an NCCL error, ends the job.
  void wait_for(InFlight& op) {
    const auto begin = Clock::now();
    const auto deadline =
        begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds_));
    auto pause = std::chrono::microseconds(10);
    for (;;) {
      const cudaError_t status = cudaEventQuery(op.end);
      if (status == cudaSuccess) break;
      if (status != cudaErrorNotReady) {
        fail("{} on group '{}' (nccl): CUDA error {}", op.what, name(), cudaGetErrorString(status));
      }
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        abort_job_for(op.what, fmt::format("failed: NCCL reports {}", ncclGetErrorString(async_error)));
      }
      if (Clock::now() > deadline) {
        abort_job_for(op.what, fmt::format("did not complete within {:.0f} s (comm.timeout_seconds): a peer rank "
                                           "died or stalled",
                                           timeout_seconds_));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    account(op);
    observe(op);
    stats_.exposed_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
  }

  bool finished(InFlight& op) {
    const cudaError_t status = cudaEventQuery(op.end);
    TITAN_CHECK(status == cudaSuccess || status == cudaErrorNotReady, "{} on group '{}' (nccl): CUDA error {}", op.what,
                name(), cudaGetErrorString(status));
    std::lock_guard<std::mutex> lock(mutex_);
    observe(op);
    return status == cudaSuccess;
  }

 private:
  static size_t count(const Tensor& tensor) { return static_cast<size_t>(tensor.numel()); }

  void check_tensor(const Tensor& tensor, const char* what) const {
    TITAN_CHECK(tensor.device() == Device::cuda(device_) && tensor.is_contiguous(),
                "{} on {} (nccl backend): needs contiguous tensors on cuda:{}, got {} on {}", what, name(), device_,
                shape_str(tensor.shape()), tensor.device().str());
  }

  void check_reducible(DType dtype, const char* what) const {
    TITAN_CHECK(nccl_reducible(dtype), "{} on {} (nccl backend): cannot reduce {} tensors", what, name(),
                dtype_name(dtype));
  }

  void check_peer(int peer, const char* what) const {
    TITAN_CHECK(peer >= 0 && peer < size() && peer != rank(), "{} on {}: peer {} is not another rank of [0, {})", what,
                name(), peer, size());
  }

  // The members' world ranks, in group rank order: one in-place all-gather
  // over the new communicator (for the flight recorder, which must know who
  // takes part in this group's collectives). Every member runs it, while
  // constructing the group.
  std::vector<int> gather_world_ranks() {
    const int32_t mine = World::instance().rank();
    const size_t bytes = static_cast<size_t>(size()) * sizeof(int32_t);
    void* ranks = nullptr;
    // Plain device memory: nothing else ever touched it, so no stream ordering to arrange.
    TITAN_CUDA_CHECK(cudaMalloc(&ranks, bytes));
    std::vector<int32_t> host(static_cast<size_t>(size()));
    int32_t* slot = static_cast<int32_t*>(ranks) + rank();
    cudaError_t status = cudaMemcpyAsync(slot, &mine, sizeof(mine), cudaMemcpyHostToDevice, stream_);
    ncclResult_t gathered = ncclSuccess;
    if (status == cudaSuccess) gathered = ncclAllGather(slot, ranks, 1, ncclInt32, comm_, stream_);
    if (status == cudaSuccess && gathered == ncclSuccess) {
      status = cudaMemcpyAsync(host.data(), ranks, bytes, cudaMemcpyDeviceToHost, stream_);
    }
    if (status == cudaSuccess) status = cudaStreamSynchronize(stream_);
    cudaFree(ranks);
    TITAN_CUDA_CHECK(status);
    TITAN_NCCL_CHECK(gathered);
    return {host.begin(), host.end()};
  }

  // Moves `op`'s flight record along as far as its events show: the host sees
  // a collective's progress on the GPU only by polling them. Caller holds mutex_.
  void observe(InFlight& op) {
    if (op.record == 0 || op.completed_seen) return;
    FlightRecorder& recorder = FlightRecorder::instance();
    if (!op.started_seen && cudaEventQuery(op.start) == cudaSuccess) {
      op.started_seen = true;
      recorder.start(op.record);
    }
    if (cudaEventQuery(op.end) == cudaSuccess) {
      op.completed_seen = true;
      recorder.complete(op.record);
    }
  }

  // Issues one collective (`issue` makes the NCCL calls on stream_) after
  // everything already queued on the current stream, and returns its Work.
  // `call` is what the flight recorder keeps of it.
  template <typename Issue>
  std::shared_ptr<Work> launch(std::string what, std::vector<Tensor> tensors, const CommCall& call, Issue&& issue) {
    auto op = std::make_shared<InFlight>();
    op->what = std::move(what);
    op->tensors = std::move(tensors);
    std::lock_guard<std::mutex> lock(mutex_);
    // Queued once issued on the host; started and completed as the events show (observe).
    op->record =
        FlightRecorder::instance().record(recorder_group_, is_point_to_point(call.op) ? ++transfers_ : ++issued_, call);
    TITAN_CUDA_CHECK(cudaSetDevice(device_));
    release_finished();
    TITAN_CUDA_CHECK(cudaEventCreate(&op->start));
    TITAN_CUDA_CHECK(cudaEventCreate(&op->end));
    TITAN_CUDA_CHECK(cudaEventRecord(inputs_ready_, ops::cuda::current_stream()));
    TITAN_CUDA_CHECK(cudaStreamWaitEvent(stream_, inputs_ready_, 0));
    TITAN_CUDA_CHECK(cudaEventRecord(op->start, stream_));
    issue();
    TITAN_CUDA_CHECK(cudaEventRecord(op->end, stream_));
    in_flight_.push_back(op);
    op->cross_node = spans_nodes();
    stats_.count_call(std::max(call.bytes_in, call.bytes_out), op->cross_node);
    return std::make_shared<NcclWork>(this, std::move(op));
  }

  // Drops the collectives that finished (in issue order: one stream), with
  // their tensors. Caller holds mutex_.
  void release_finished() {
    while (!in_flight_.empty() && cudaEventQuery(in_flight_.front()->end) == cudaSuccess) {
      account(*in_flight_.front());
      observe(*in_flight_.front());
      in_flight_.pop_front();
    }
  }

  // Caller holds mutex_.
  void account(InFlight& op) {
    if (op.accounted) return;
    float milliseconds = 0.0f;
    if (cudaEventElapsedTime(&milliseconds, op.start, op.end) == cudaSuccess) {
      stats_.add_busy(milliseconds / 1000.0, op.cross_node);
    }
    op.accounted = true;
  }

  [[noreturn]] void abort_job_for(const std::string& what, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& op : in_flight_) observe(*op);
    }
    FlightRecorder::instance().dump(fmt::format("{} on group '{}' (nccl) {}", what, name(), why), /*final=*/true);
    std::fprintf(stderr, "titan: rank %d: %s on group '%s' (nccl) %s; aborting every rank\n", World::instance().rank(),
                 what.c_str(), name().c_str(), why.c_str());
    std::fflush(stderr);
    // Tears down the kernels still waiting on peers, so the process can exit.
    ncclCommAbort(comm_);
    comm_ = nullptr;
    abort_job(3);
  }

  void release() {
    in_flight_.clear();
    barrier_buffer_ = Tensor();
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (inputs_ready_ != nullptr) cudaEventDestroy(inputs_ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    comm_ = nullptr;
    inputs_ready_ = nullptr;
    stream_ = nullptr;
  }

  ncclComm_t comm_;
  int device_;
  double timeout_seconds_;
  std::shared_ptr<ProcessGroup> bootstrap_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
  Tensor barrier_buffer_;
  mutable std::mutex mutex_;
  std::deque<std::shared_ptr<InFlight>> in_flight_;
  CommStats stats_;
  int recorder_group_ = -1;
  uint64_t issued_ = 0;     // collectives issued so far (under mutex_)
  uint64_t transfers_ = 0;  // sends and receives issued so far (under mutex_)
};

void NcclWork::wait() { group_->wait_for(*op_); }

bool NcclWork::completed() { return group_->finished(*op_); }

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<ProcessGroup> bootstrap, int device,
                                                      std::string name, double timeout_seconds) {
  TITAN_CHECK(bootstrap != nullptr, "nccl process group '{}': no CPU group to bootstrap over", name);
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess) cudaGetLastError();  // clear the sticky "no device" status
  TITAN_CHECK(status == cudaSuccess && devices > 0,
              "process group backend 'nccl' (group '{}', rank {}): no CUDA device is visible ({}); use 'mpi' for CPU "
              "tensors",
              name, bootstrap->rank(), status == cudaSuccess ? "0 devices" : cudaGetErrorString(status));
  TITAN_CHECK(device >= 0 && device < devices,
              "process group backend 'nccl' (group '{}', rank {}): cuda:{} does not exist ({} visible)", name,
              bootstrap->rank(), device, devices);
  TITAN_CUDA_CHECK(cudaSetDevice(device));
  // Rank 0 makes the id; the CPU group carries it to the others.
  ncclUniqueId id{};
  Tensor bytes = Tensor::zeros({static_cast<int64_t>(sizeof(id))}, DType::u8);
  if (bootstrap->rank() == 0) {
    TITAN_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
  }
  bootstrap->broadcast(bytes, 0)->wait();
  std::memcpy(&id, bytes.data_ptr(), sizeof(id));
  ncclComm_t comm = nullptr;
  TITAN_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap->size(), id, bootstrap->rank()));
  return std::make_shared<NcclProcessGroup>(comm, device, std::move(name), timeout_seconds, std::move(bootstrap));
}

}  // namespace titan::comm
