#include "titan/core/dispatch.h"

#include <atomic>
#include <mutex>

namespace titan {

namespace {
// Constant-initialised, so it is set before any dynamic initialiser can look a kernel up.
std::atomic<BackendRegistrar> g_registrar{nullptr};
}  // namespace

void set_backend_registrar(BackendRegistrar registrar) { g_registrar = registrar; }

void ensure_backends_registered() {
  const BackendRegistrar registrar = g_registrar.load();
  if (registrar == nullptr) return;
  static std::once_flag once;
  std::call_once(once, registrar);
}

void unsupported_dtype(const char* op, Device device, DType dtype) {
  fail("op '{}' has no {} kernel for dtype {}", op, device.str(), dtype_name(dtype));
}

}  // namespace titan
