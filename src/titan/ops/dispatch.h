// Op dispatch: each op has one table of kernels, one slot per device type.
// Backends fill their slots at start-up; calling an op on a device without a
// kernel is a titan::Error naming the op and device, never a silent fallback.
#pragma once

#include <array>
#include <utility>

#include "titan/core/device.h"
#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/core/trace_context.h"
#include "titan/ops/op_span.h"

namespace titan::ops {

// Registers the CPU kernels (and the CUDA ones when compiled in and a GPU is
// present) exactly once; every kernel lookup calls it first.
void ensure_backends_registered();

// The error a kernel raises for a dtype it does not implement.
[[noreturn]] void unsupported_dtype(const char* op, Device device, DType dtype);

template <typename Signature>
class Op;

template <typename Result, typename... Args>
class Op<Result(Args...)> {
 public:
  using Kernel = Result (*)(Args...);

  explicit constexpr Op(const char* name) : name_(name) {}

  const char* name() const { return name_; }
  void set_kernel(DeviceType type, Kernel kernel) { kernels_[static_cast<size_t>(type)] = kernel; }
  bool has_kernel(DeviceType type) const {
    ensure_backends_registered();
    return kernels_[static_cast<size_t>(type)] != nullptr;
  }
  Kernel kernel(Device device) const {
    ensure_backends_registered();
    Kernel kernel = kernels_[static_cast<size_t>(device.type)];
    TITAN_CHECK(kernel != nullptr, "op '{}' has no kernel for device {}", name_, device.str());
    return kernel;
  }
  // With the profiler compiled in, the call names its op for the memory
  // recorder (always: one thread-local store) and, while the profiler is
  // active, is recorded as a span with its tensors' shapes.
  template <typename... CallArgs>
  Result operator()(Device device, CallArgs&&... args) const {
    const Kernel run = kernel(device);
#if TITAN_PROFILER
    const trace::OpScope scope(name_);
    if (profiler::active()) {
      OpSpan span(name_, device);
      (span.describe(args), ...);
      return run(std::forward<CallArgs>(args)...);
    }
#endif
    return run(std::forward<CallArgs>(args)...);
  }

 private:
  const char* name_;
  std::array<Kernel, kNumDeviceTypes> kernels_{};
};

}  // namespace titan::ops
