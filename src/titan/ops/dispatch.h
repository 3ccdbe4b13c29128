// The ops layer's kernel tables (core/dispatch.h's KernelTable): every lookup
// first calls ops::ensure_backends_registered, which registers the CPU
// kernels (and the CUDA ones when compiled in and a GPU is present) exactly
// once. Because the lookups name it, any program that calls an op links the
// registration, and with it every kernel.
#pragma once

#include "titan/core/dispatch.h"

namespace titan::ops {

void ensure_backends_registered();

template <typename Signature>
using Op = KernelTable<Signature, ensure_backends_registered>;

}  // namespace titan::ops
