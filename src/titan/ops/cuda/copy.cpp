// CUDA copies (any strides, any dtype pair), fills (any strides) and host <->
// device transfers. Layouts are first reduced to as few dims as possible (size-1
// dims dropped, dims contiguous in both tensors merged), so the usual cases
// become one flat loop and only true permutations pay for index arithmetic.
#include <cstring>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/core/copy.h"
#include "titan/ops/cuda/copy_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

// The row-major walk over dst's shape with dst's and src's strides, merged.
// `src` may be dst itself (fills).
CopyLayout merged_layout(const Tensor& dst, const Tensor& src) {
  std::vector<int64_t> sizes, dst_strides, src_strides;
  for (int64_t d = 0; d < dst.dim(); ++d) {
    const int64_t size = dst.size(d);
    if (size == 1) continue;
    if (!sizes.empty() && dst_strides.back() == dst.stride(d) * size && src_strides.back() == src.stride(d) * size) {
      sizes.back() *= size;
      dst_strides.back() = dst.stride(d);
      src_strides.back() = src.stride(d);
    } else {
      sizes.push_back(size);
      dst_strides.push_back(dst.stride(d));
      src_strides.push_back(src.stride(d));
    }
  }
  CopyLayout layout;
  if (sizes.empty()) {  // one element
    layout.dims = 1;
    layout.sizes[0] = layout.dst_strides[0] = layout.src_strides[0] = 1;
    return layout;
  }
  TITAN_CHECK(sizes.size() <= static_cast<size_t>(kMaxCopyDims),
              "copy on {}: shape {} (strides {} and {}) needs {} dims after merging; at most {} are supported",
              dst.device().str(), shape_str(dst.shape()), shape_str(dst.strides()), shape_str(src.strides()),
              sizes.size(), kMaxCopyDims);
  layout.dims = static_cast<int>(sizes.size());
  for (int d = 0; d < layout.dims; ++d) {
    layout.sizes[d] = sizes[static_cast<size_t>(d)];
    layout.dst_strides[d] = dst_strides[static_cast<size_t>(d)];
    layout.src_strides[d] = src_strides[static_cast<size_t>(d)];
  }
  return layout;
}

bool is_flat(const CopyLayout& layout) {
  return layout.dims == 1 && layout.dst_strides[0] == 1 && layout.src_strides[0] == 1;
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const CopyLayout layout = merged_layout(dst, src);
  if (is_flat(layout)) {
    TITAN_CUDA_CHECK(launch_convert(dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype(), n, current_stream()));
  } else {
    TITAN_CUDA_CHECK(
        launch_strided_copy(dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype(), layout, current_stream()));
  }
}

void fill_kernel(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  // Encode the value once on the host (the CPU rounding rules), then splat its bits.
  Tensor one = Tensor::full({1}, value, dst.dtype());
  uint64_t bits = 0;
  std::memcpy(&bits, one.data_ptr(), one.element_size());
  const int size = static_cast<int>(dst.element_size());
  const CopyLayout layout = merged_layout(dst, dst);
  if (is_flat(layout)) {
    TITAN_CUDA_CHECK(launch_fill_bits(dst.data_ptr(), size, bits, dst.numel(), current_stream()));
  } else {
    TITAN_CUDA_CHECK(launch_strided_fill_bits(dst.data_ptr(), size, bits, layout, current_stream()));
  }
}

// Both sides contiguous, same dtype (titan::copy_ stages anything else). The
// copy is ordered after the kernels already queued on the current stream, and
// waited for: the host may read or free its buffer as soon as this returns.
void transfer_kernel(const Tensor& dst, const Tensor& src) {
  TITAN_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(),
              "transfer from {} to {}: needs contiguous tensors of one size (shapes {} and {})", src.device().str(),
              dst.device().str(), shape_str(src.shape()), shape_str(dst.shape()));
  if (dst.nbytes() == 0) return;
  const cudaStream_t stream = current_stream();
  TITAN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDefault, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

void register_copy() {
  copy_kernels.set_kernel(DeviceType::cuda, copy_kernel);
  fill_kernels.set_kernel(DeviceType::cuda, fill_kernel);
  transfer_kernels.set_kernel(DeviceType::cuda, transfer_kernel);
}

}  // namespace titan::ops::cuda
