// Copies between tensors of any strides and dtypes (casting through f32 with
// round-to-nearest-even), fills, and transfers between devices: the data
// movement Tensor's own methods (to, contiguous, clone, zeros, full) are made
// of. core owns the tables; the ops layer's backends fill them.
#pragma once

#include "titan/core/dispatch.h"
#include "titan/core/tensor.h"

namespace titan {

// dst[...] = src[...] converted to dst's dtype; shapes must match.
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);
Tensor cast(const Tensor& src, DType dtype);

using CopyKernel = void(const Tensor& dst, const Tensor& src);
using FillKernel = void(const Tensor& dst, double value);
inline KernelTable<CopyKernel> copy_kernels{"copy"};
inline KernelTable<FillKernel> fill_kernels{"fill"};
// Cross-device copies of contiguous tensors are owned by the non-CPU backend.
inline KernelTable<CopyKernel> transfer_kernels{"transfer"};

// Waits until the device has finished all work queued so far (a no-op on the
// CPU, whose kernels finish before they return). For timings and benchmarks.
void synchronize(Device device);
using SynchronizeKernel = void();
inline KernelTable<SynchronizeKernel> synchronize_kernels{"synchronize"};

}  // namespace titan
