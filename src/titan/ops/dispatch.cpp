#include "titan/ops/dispatch.h"

#include <mutex>

namespace titan::ops {

namespace cpu {
void register_kernels();
}
#if defined(TITAN_WITH_CUDA)
namespace cuda {
void register_kernels();  // a no-op when no GPU is visible
}
#endif

void ensure_backends_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::register_kernels();
#if defined(TITAN_WITH_CUDA)
    cuda::register_kernels();
#endif
  });
}

void unsupported_dtype(const char* op, Device device, DType dtype) {
  fail("op '{}' has no {} kernel for dtype {}", op, device.str(), dtype_name(dtype));
}

}  // namespace titan::ops
