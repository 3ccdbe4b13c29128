// CUDA copies, fills and host <-> device transfers (contiguous tensors; the
// strided cases arrive with the rest of the CUDA backend).
#include <cstring>

#include "titan/core/tensor.h"
#include "titan/ops/copy.h"
#include "titan/ops/cuda/copy_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"

namespace titan::ops::cuda {
namespace {

void copy_kernel(const Tensor& dst, const Tensor& src) {
  TITAN_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy on {}: strided copies are not implemented yet",
              dst.device().str());
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype() == src.dtype()) {
    TITAN_CUDA_CHECK(cudaMemcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice));
  } else if (dst.dtype() == DType::bf16 && src.dtype() == DType::f32) {
    TITAN_CUDA_CHECK(launch_f32_to_bf16(dst.data_ptr(), src.data_ptr(), n, nullptr));
  } else if (dst.dtype() == DType::f32 && src.dtype() == DType::bf16) {
    TITAN_CUDA_CHECK(launch_bf16_to_f32(dst.data_ptr(), src.data_ptr(), n, nullptr));
  } else {
    unsupported_dtype("copy", dst.device(), src.dtype());
  }
}

void fill_kernel(const Tensor& dst, double value) {
  TITAN_CHECK(dst.is_contiguous(), "fill on {}: strided fills are not implemented yet", dst.device().str());
  if (dst.numel() == 0) return;
  // Encode the value once on the host (the CPU rounding rules), then splat its bits.
  Tensor one = Tensor::full({1}, value, dst.dtype());
  uint64_t bits = 0;
  std::memcpy(&bits, one.data_ptr(), one.element_size());
  TITAN_CUDA_CHECK(launch_fill_bits(dst.data_ptr(), static_cast<int>(dst.element_size()), bits, dst.numel(), nullptr));
}

void transfer_kernel(const Tensor& dst, const Tensor& src) {
  TITAN_CUDA_CHECK(cudaMemcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDefault));
}

}  // namespace

void register_copy() {
  copy_kernels.set_kernel(DeviceType::cuda, copy_kernel);
  fill_kernels.set_kernel(DeviceType::cuda, fill_kernel);
  transfer_kernels.set_kernel(DeviceType::cuda, transfer_kernel);
}

}  // namespace titan::ops::cuda
