#include "titan/ops/dispatch.h"

namespace titan::ops {

namespace cpu {
void register_kernels();
}
#if defined(TITAN_WITH_CUDA)
namespace cuda {
void register_kernels();  // a no-op when no GPU is visible
}
#endif

namespace {

void register_backends() {
  cpu::register_kernels();
#if defined(TITAN_WITH_CUDA)
  cuda::register_kernels();
#endif
}

// core's own tables (Tensor::to, clone, zeros, ...) can be looked up before any
// op runs: name the registrar before main.
[[maybe_unused]] const bool kRegistrarNamed = (set_backend_registrar(register_backends), true);

}  // namespace

void ensure_backends_registered() { titan::ensure_backends_registered(); }

}  // namespace titan::ops

// Named by the link of every program that links titan_ops (--undefined, in
// src/titan/CMakeLists.txt), so that this file, and the registrar above, is
// linked even into a program that calls no op and only uses Tensor's own
// methods (whose tables core looks up through the registrar).
extern "C" const bool titan_ops_backends_linked = titan::ops::kRegistrarNamed;
