#include "titan/comm/gloo_process_group.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "titan/core/units.h"

namespace titan::comm {

namespace {

// One TCP device (its event loop thread) per process, shared by every quorum's group.
// GLOO_SOCKET_IFNAME (PyTorch's name) picks the interface; otherwise the host
// name's address, or loopback where the host name does not resolve.
std::shared_ptr<gloo::transport::Device> gloo_tcp_device() {
  static std::mutex mutex;
  static std::shared_ptr<gloo::transport::Device> device;
  const std::lock_guard lock(mutex);
  if (device) return device;
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0') {
    attr.iface = iface;
  } else {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const bool resolves = getaddrinfo(host, nullptr, &hints, &found) == 0;
    if (found != nullptr) freeaddrinfo(found);
    attr.hostname = resolves ? host : "127.0.0.1";
  }
  device = gloo::transport::tcp::CreateDevice(attr);
  return device;
}

template <typename T>
void gloo_all_reduce_typed(const std::shared_ptr<gloo::Context>& context, const Tensor& tensor, ReduceOp op,
                           uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions options(context);
  options.setOutput(tensor.data<T>(), static_cast<size_t>(tensor.numel()));
  options.setTag(tag);
  options.setTimeout(timeout);
  using Fn = void (*)(void*, const void*, const void*, size_t);
  options.setReduceFunction(op == ReduceOp::max ? static_cast<Fn>(&gloo::max<T>) : static_cast<Fn>(&gloo::sum<T>));
  gloo::allreduce(options);
  if (op == ReduceOp::avg) {
    T* data = tensor.data<T>();
    const T members = static_cast<T>(context->size);
    for (int64_t i = 0; i < tensor.numel(); ++i) data[i] /= members;
  }
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(gloo::rendezvous::Store& store, int rank, int size,
                                   std::chrono::milliseconds timeout, std::string name)
    : ProcessGroup(rank, size, std::move(name)), timeout_(timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  try {
    std::shared_ptr<gloo::transport::Device> device = gloo_tcp_device();
    context->connectFullMesh(store, device);
  } catch (const GlooPeerLost&) {
    throw;
  } catch (const std::exception& error) {
    lost("rendezvous", error);
  }
  context_ = std::move(context);
}

GlooProcessGroup::~GlooProcessGroup() = default;

void GlooProcessGroup::lost(const char* what, const std::exception& error) const {
  throw GlooPeerLost(
      fmt::format("gloo group {}: {} failed on member {} of {}: {}", name(), what, rank(), size(), error.what()));
}

void GlooProcessGroup::check_host(const Tensor& tensor, const char* what) const {
  TITAN_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(),
              "gloo group {}: {} needs a contiguous host tensor (fault tolerance copies device gradients to the host)",
              name(), what);
}

std::shared_ptr<Work> GlooProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_host(tensor, "all_reduce");
  check_reduce_op(*this, "all_reduce", tensor.dtype(), op);
  if (size() == 1 || tensor.numel() == 0) return completed_work();
  const auto start = SteadyClock::now();
  try {
    switch (tensor.dtype()) {
      case DType::f32:
        gloo_all_reduce_typed<float>(context_, tensor, op, tag_++, timeout_);
        break;
      case DType::i32:
        gloo_all_reduce_typed<int32_t>(context_, tensor, op, tag_++, timeout_);
        break;
      case DType::i64:
        gloo_all_reduce_typed<int64_t>(context_, tensor, op, tag_++, timeout_);
        break;
      default:
        fail("gloo group {}: all_reduce of {} tensors is not supported (f32, i32, i64)", name(),
             dtype_name(tensor.dtype()));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    lost("all_reduce", error);
  }
  record(tensor, start);
  return completed_work();
}

std::shared_ptr<Work> GlooProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_host(tensor, "broadcast");
  TITAN_CHECK(root >= 0 && root < size(), "gloo group {}: broadcast root {} outside 0..{}", name(), root, size() - 1);
  if (size() == 1 || tensor.nbytes() == 0) return completed_work();
  const auto start = SteadyClock::now();
  try {
    gloo::BroadcastOptions options(context_);
    options.setOutput(static_cast<uint8_t*>(tensor.data_ptr()), tensor.nbytes());
    options.setRoot(root);
    options.setTag(tag_++);
    options.setTimeout(timeout_);
    gloo::broadcast(options);
  } catch (const std::exception& error) {
    lost("broadcast", error);
  }
  record(tensor, start);
  return completed_work();
}

void GlooProcessGroup::record(const Tensor& tensor, SteadyClock::time_point start) {
  // Synchronous: the caller waited for all of it.
  const double seconds = seconds_since(start);
  stats_.count_call(static_cast<int64_t>(tensor.nbytes()), spans_nodes());
  stats_.add_busy(seconds, spans_nodes());
  stats_.exposed_seconds += seconds;
}

std::shared_ptr<Work> GlooProcessGroup::send(const Tensor& tensor, int peer, int tag) {
  check_host(tensor, "send");
  try {
    auto buffer = context_->createUnboundBuffer(tensor.data_ptr(), tensor.nbytes());
    buffer->send(peer, static_cast<uint64_t>(tag));
    buffer->waitSend(timeout_);
  } catch (const std::exception& error) {
    lost("send", error);
  }
  return completed_work();
}

std::shared_ptr<Work> GlooProcessGroup::recv(const Tensor& tensor, int peer, int tag) {
  check_host(tensor, "recv");
  try {
    auto buffer = context_->createUnboundBuffer(tensor.data_ptr(), tensor.nbytes());
    buffer->recv(peer, static_cast<uint64_t>(tag));
    buffer->waitRecv(timeout_);
  } catch (const std::exception& error) {
    lost("recv", error);
  }
  return completed_work();
}

void GlooProcessGroup::barrier() {
  if (size() == 1) return;
  try {
    gloo::BarrierOptions options(context_);
    options.setTag(tag_++);
    options.setTimeout(timeout_);
    gloo::barrier(options);
  } catch (const std::exception& error) {
    lost("barrier", error);
  }
}

std::shared_ptr<Work> GlooProcessGroup::all_gather(const Tensor&, const Tensor&) {
  fail("gloo group {}: all_gather is not supported (fault tolerance needs all_reduce and broadcast only)", name());
}

std::shared_ptr<Work> GlooProcessGroup::reduce_scatter(const Tensor&, const Tensor&, ReduceOp) {
  fail("gloo group {}: reduce_scatter is not supported (fault tolerance needs all_reduce and broadcast only)", name());
}

std::shared_ptr<Work> GlooProcessGroup::all_to_all(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                                   const std::vector<int64_t>&) {
  fail("gloo group {}: all_to_all is not supported (fault tolerance needs all_reduce and broadcast only)", name());
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::split(int, int, const std::string&) {
  fail("gloo group {}: split is not supported: each quorum builds its own group", name());
}

}  // namespace titan::comm
