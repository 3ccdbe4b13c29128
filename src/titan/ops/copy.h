// Copies between tensors of any strides and dtypes (casting through f32 with
// round-to-nearest-even), fills, and transfers between devices.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// dst[...] = src[...] converted to dst's dtype; shapes must match.
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);
Tensor cast(const Tensor& src, DType dtype);

using CopyKernel = void(const Tensor& dst, const Tensor& src);
using FillKernel = void(const Tensor& dst, double value);
inline Op<CopyKernel> copy_kernels{"copy"};
inline Op<FillKernel> fill_kernels{"fill"};
// Cross-device copies of contiguous tensors are owned by the non-CPU backend.
inline Op<CopyKernel> transfer_kernels{"transfer"};

// Waits until the device has finished all work queued so far (a no-op on the
// CPU, whose kernels finish before they return). For timings and benchmarks.
void synchronize(Device device);
using SynchronizeKernel = void();
inline Op<SynchronizeKernel> synchronize_kernels{"synchronize"};

}  // namespace titan::ops
