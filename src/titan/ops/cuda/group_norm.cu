// CUDA group norm (ops/group_norm.h), forward only, the arithmetic of the CPU
// kernel (ops/cpu/kernels/group_norm.cpp): per (sample, group) the mean, then
// the biased variance as the mean of squared deviations from it (two passes,
// no sum-of-squares cancellation when the mean is large against the spread),
// both summed in f64 as the CPU does, so a group of millions of elements (a
// 1024 x 1024 image's first level) loses nothing to the sum; then
//   y = (x - mean) * (rstd * weight[c]) + bias[c]
// in f32, rounded once to x's dtype. x contiguous [B, C, *], f32 or bf16;
// weight and bias [C], each f32 or bf16 on its own.
//
// Kept simple rather than fast: one block per (sample, group), grid-strided,
// its threads striding over the group's elements (coalesced) and reducing with
// the fixed-order block sums of device_math.cuh (run-to-run identical, no
// atomics). It reads x three times; with FLUX's 32 groups and one image that
// is only 32 blocks, so a large image leaves most of a big GPU idle. A
// split-group reduction would fill it; this one is easy to check against the
// CPU loop. Written and compiled without a GPU: see docs/flux.md.
#include <cuda_bf16.h>

#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/float_dtype.h"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/group_norm.h"

namespace titan::ops::cuda {
namespace group_norm_device {

constexpr int kGroupNormThreads = 512;

struct GroupNormArgs {
  const void* weight;
  const void* bias;
  bool weight_bf16, bias_bf16;
  int64_t tasks, groups, per_group, positions;  // tasks = B * groups
  float eps;
};

__device__ __forceinline__ float load_affine(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}

template <typename T>
__global__ void group_norm_forward(T* __restrict__ y, const T* __restrict__ x, GroupNormArgs a) {
  __shared__ double scratch[kWarpSize];
  const int64_t group_size = a.per_group * a.positions;
  for (int64_t task = blockIdx.x; task < a.tasks; task += gridDim.x) {
    const T* src = x + task * group_size;
    T* dst = y + task * group_size;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < group_size; i += blockDim.x) sum += load_f32(src, i);
    const double mean = block_sum(sum, scratch) / static_cast<double>(group_size);
    double squares = 0.0;
    for (int64_t i = threadIdx.x; i < group_size; i += blockDim.x) {
      const double d = static_cast<double>(load_f32(src, i)) - mean;
      squares += d * d;
    }
    const double rstd = 1.0 / sqrt(block_sum(squares, scratch) / static_cast<double>(group_size) + a.eps);
    const int64_t first_channel = (task % a.groups) * a.per_group;
    const float mean_f = static_cast<float>(mean);
    for (int64_t i = threadIdx.x; i < group_size; i += blockDim.x) {
      const int64_t channel = first_channel + i / a.positions;
      const float scale = static_cast<float>(rstd * load_affine(a.weight, a.weight_bf16, channel));
      const float shift = load_affine(a.bias, a.bias_bf16, channel);
      store_f32(dst, i, (load_f32(src, i) - mean_f) * scale + shift);
    }
  }
}

void group_norm_kernel(const Tensor& y, const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                       float eps) {
  const char* op = "group_norm";
  const bool bf16 = is_bf16(op, x);
  if (x.numel() == 0) return;
  const int64_t batch = x.size(0), channels = x.size(1);
  const int64_t positions = x.numel() / (batch * channels);
  const GroupNormArgs a{.weight = weight.data_ptr(),
                        .bias = bias.data_ptr(),
                        .weight_bf16 = is_bf16(op, weight),
                        .bias_bf16 = is_bf16(op, bias),
                        .tasks = batch * groups,
                        .groups = groups,
                        .per_group = channels / groups,
                        .positions = positions,
                        .eps = eps};
  const unsigned grid = grid_for(a.tasks, 1);  // one block per task, at most 65535 (grid-strided beyond)
  cudaStream_t stream = current_stream();
  if (bf16) {
    group_norm_forward<<<grid, kGroupNormThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(y.data_ptr()),
                                                               static_cast<const __nv_bfloat16*>(x.data_ptr()), a);
  } else {
    group_norm_forward<<<grid, kGroupNormThreads, 0, stream>>>(y.data<float>(), x.data<float>(), a);
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace group_norm_device

void register_group_norm() { group_norm_kernels.set_kernel(DeviceType::cuda, group_norm_device::group_norm_kernel); }

}  // namespace titan::ops::cuda
