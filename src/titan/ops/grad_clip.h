// Gradient clipping with every number kept on the device, so a training step
// needs no host read (what lets a CUDA graph capture it): the norm and the
// clipping factor are computed into a tensor, and gradients are scaled by a
// factor read from device memory.
#pragma once

#include <span>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// From a 1-element f32 sum of squares: [norm, factor] f32 on its device, with
// norm = sqrt(sum_squares) and factor = min(1, max_norm / (norm + 1e-6)) as
// torch.nn.utils.clip_grad_norm_ (1 when max_norm <= 0: no clipping). A
// non-finite norm gives 1, where torch's clamp gives NaN and so NaN gradients
// everywhere: the trainer's non-finite check must still see which gradient
// was not finite.
// Computed in double, rounded once, as a host computation would be.
Tensor clip_scalars(const Tensor& sum_squares, double max_norm);
// out = x * factors[index] (f32 math, one rounding); out may be x.
void scale_by(const Tensor& out, const Tensor& x, const Tensor& factors, int64_t index);
Tensor scaled_by(const Tensor& x, const Tensor& factors, int64_t index);
void scale_all_by_(std::span<const Tensor> tensors, const Tensor& factors, int64_t index);

using ClipScalarsKernel = void(const Tensor& out, const Tensor& sum_squares, double max_norm);
using ScaleByKernel = void(const Tensor& out, const Tensor& x, const Tensor& factors, int64_t index);
inline Op<ClipScalarsKernel> clip_scalars_kernels{"clip_scalars"};
inline Op<ScaleByKernel> scale_by_kernels{"scale_by"};

}  // namespace titan::ops
