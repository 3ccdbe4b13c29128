// Softmax over the last dimension and its backward.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

Tensor softmax(const Tensor& x);
// grad_x = y * (grad_y - sum(grad_y * y)) row by row.
Tensor softmax_backward(const Tensor& grad_y, const Tensor& y);

using SoftmaxKernel = void(const Tensor& y, const Tensor& x);
using SoftmaxBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_y, const Tensor& y);
inline Op<SoftmaxKernel> softmax_kernels{"softmax"};
inline Op<SoftmaxBackwardKernel> softmax_backward_kernels{"softmax_backward"};

}  // namespace titan::ops
