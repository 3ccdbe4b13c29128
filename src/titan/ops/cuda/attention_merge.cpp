// CUDA attention merge: dtype check and launch. ops/attention.cpp has checked
// shapes and made the piece contiguous; the accumulators are contiguous f32.
#include "titan/core/tensor.h"
#include "titan/ops/attention.h"
#include "titan/ops/cuda/attention_merge_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

void attention_merge_kernel(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out, const Tensor& lse) {
  if (out.dtype() != DType::f32 && out.dtype() != DType::bf16)
    unsupported_dtype("attention_merge_", out.device(), out.dtype());
  TITAN_CUDA_CHECK(launch_attention_merge(out.dtype(), out_acc.data<float>(), lse_acc.data<float>(), out.data_ptr(),
                                          lse.data<float>(), out.size(0), out.size(1), out.size(2), out.size(3),
                                          current_stream()));
}

}  // namespace

void register_attention_merge() { attention_merge_kernels.set_kernel(DeviceType::cuda, attention_merge_kernel); }

}  // namespace titan::ops::cuda
