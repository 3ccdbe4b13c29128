// Reductions to an f32 scalar (a 0-d tensor on the input's device), plus the
// sum that undoes broadcasting. Sums run over fixed-size blocks combined in a
// fixed order, so results do not change with the thread count.
#pragma once

#include <span>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

enum class ReduceOp { sum, mean, max, sum_squares };

Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
Tensor max(const Tensor& x);
Tensor sum_squares(const Tensor& x);
// Sums x (shape broadcast from `shape`) back down to `shape`, in x's dtype.
Tensor sum_to_shape(const Tensor& x, const Shape& shape);
// sqrt(sum of squares over every tensor): the global gradient norm.
Tensor global_l2_norm(std::span<const Tensor> tensors);

using ReduceKernel = void(ReduceOp op, const Tensor& out, const Tensor& x);
using SumToShapeKernel = void(const Tensor& out, const Tensor& x);
using GlobalL2NormKernel = void(const Tensor& out, std::span<const Tensor> tensors);
inline Op<ReduceKernel> reduce_kernels{"reduce"};
inline Op<SumToShapeKernel> sum_to_shape_kernels{"sum_to_shape"};
inline Op<GlobalL2NormKernel> global_l2_norm_kernels{"global_l2_norm"};

}  // namespace titan::ops
