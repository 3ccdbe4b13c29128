// Kernel tables: one per op, one slot per device type. Backends fill their
// slots when they register; calling an op on a device without a kernel is a
// titan::Error naming the op and device, never a silent fallback.
//
// core declares the tables its own Tensor methods need (core/copy.h) and the
// ops layer the rest (ops/dispatch.h). The backends live in the ops layer,
// which core cannot call: ops names its registration function at start-up
// (set_backend_registrar), and every lookup makes sure it has run.
#pragma once

#include <array>
#include <utility>

#include "titan/core/device.h"
#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/core/op_span.h"
#include "titan/core/trace_context.h"

namespace titan {

using BackendRegistrar = void (*)();
// Called once, at static initialisation, by the layer that holds the backends.
void set_backend_registrar(BackendRegistrar registrar);
// Runs the registrar exactly once (a no-op until one is set).
void ensure_backends_registered();

// The error a kernel raises for a dtype it does not implement.
[[noreturn]] void unsupported_dtype(const char* op, Device device, DType dtype);

// `Ensure` runs before every lookup: the layer that declares a table names
// its own function there, so that a program using the table links that
// layer's registration (ops::Op in ops/dispatch.h).
template <typename Signature, void (*Ensure)() = ensure_backends_registered>
class KernelTable;

template <typename Result, typename... Args, void (*Ensure)()>
class KernelTable<Result(Args...), Ensure> {
 public:
  using Kernel = Result (*)(Args...);

  explicit constexpr KernelTable(const char* name) : name_(name) {}

  const char* name() const { return name_; }
  void set_kernel(DeviceType type, Kernel kernel) { kernels_[static_cast<size_t>(type)] = kernel; }
  bool has_kernel(DeviceType type) const {
    Ensure();
    return kernels_[static_cast<size_t>(type)] != nullptr;
  }
  Kernel kernel(Device device) const {
    Ensure();
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

}  // namespace titan
