// Group normalisation, forward only (the FLUX autoencoder runs frozen), as
// torch.nn.functional.group_norm: for x [B, C, *] split into `groups` groups
// of C / groups channels,
//   y[b, c, s] = (x[b, c, s] - mean[b, g]) / sqrt(var[b, g] + eps) * weight[c] + bias[c]
// where mean and the biased variance run over the group's channels and every
// position s. Kernels: CPU (every kernel set): the statistics in f64, two
// passes (the mean, then squared deviations from it), so a group of millions
// of elements (a 1024 x 1024 image's first level) loses nothing to the sum;
// the output in f32, rounded once. CUDA (ops/cuda/group_norm.cu): the same
// arithmetic, one block per (sample, group); written and compiles, but has
// not yet run on a GPU (its tests, tests/ops/group_norm_test.cpp's
// CudaGroupNorm, skip without one).
#pragma once

#include <cstdint>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// x f32 or bf16 (y has its dtype); weight and bias [C], each f32 or bf16.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps);

using GroupNormKernel = void(const Tensor& y, const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                             float eps);
inline Op<GroupNormKernel> group_norm_kernels{"group_norm"};

}  // namespace titan::ops
