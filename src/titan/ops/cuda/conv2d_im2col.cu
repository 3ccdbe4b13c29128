// CUDA im2col for ops::conv2d (ops/conv2d.h), the layout of the CPU kernel
// (ops/cpu/kernels/conv2d.cpp): for one image and a block of output rows,
// cols [K (+1), rows * Wo] with K = Cin kh kw ordered (c, u, v), zeros where a
// window reaches into the (per-side) padding, and a last row of ones when the
// bias rides in the GEMM. Pure copies, so bf16 stays exact and the result is
// the CPU's bit for bit; all arithmetic is in the GEMM that follows.
//
// Kept simple rather than fast: one thread per element of cols (a grid-stride
// loop), consecutive threads on consecutive output columns, so the writes
// coalesce and the reads are strided by the conv's stride. Each input value is
// read kh kw times (through L2); a shared-memory tiled version would read it
// once, but the GEMM after it dominates, and this one is easy to check against
// the CPU loop. Written and compiled without a GPU: see docs/flux.md.
#include <cuda_bf16.h>

#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/conv2d.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/float_dtype.h"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace conv2d_im2col_device {

struct Im2colArgs {
  int64_t channels, height, width;   // of x
  int64_t kernel_h, kernel_w;        // of the weight
  int64_t first_row, out_w, stride;  // the block of output rows
  int64_t pad_top, pad_left;         // bottom and right padding only bound Ho and Wo
  int64_t k, n;                      // cols: K window rows (+1 with ones_row) of n = rows * Wo
  bool ones_row;
};

// cols[r, col] for r < K + ones_row, col < n: x[c, i s + u - top, j s + v - left]
// (zero outside the image) with (c, u, v) = r and (i, j) = (first_row + col / Wo, col % Wo).
template <typename T>
__global__ void im2col(T* __restrict__ cols, const T* __restrict__ image, Im2colArgs a) {
  const int64_t total = (a.k + (a.ones_row ? 1 : 0)) * a.n;
  const int64_t taps = a.kernel_h * a.kernel_w;
  for (int64_t index = first_index(); index < total; index += grid_stride()) {
    const int64_t r = index / a.n, col = index % a.n;
    if (r == a.k) {  // the ones row
      store_f32(cols, index, 1.0f);
      continue;
    }
    const int64_t c = r / taps, u = (r / a.kernel_w) % a.kernel_h, v = r % a.kernel_w;
    const int64_t i = a.first_row + col / a.out_w, j = col % a.out_w;
    const int64_t src_row = i * a.stride + u - a.pad_top, src_col = j * a.stride + v - a.pad_left;
    if (src_row < 0 || src_row >= a.height || src_col < 0 || src_col >= a.width) {
      store_f32(cols, index, 0.0f);
    } else {
      cols[index] = image[(c * a.height + src_row) * a.width + src_col];
    }
  }
}

void im2col_kernel(const Tensor& cols, const Tensor& x, const Im2colWindow& w) {
  const bool bf16 = is_bf16("conv2d_im2col", x);
  const int64_t channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t k = channels * w.kernel_h * w.kernel_w, n = w.rows * w.out_w;
  const int64_t total = (k + (w.ones_row ? 1 : 0)) * n;
  TITAN_CHECK(cols.numel() == total && cols.dtype() == x.dtype(),
              "conv2d_im2col on cuda: cols {} ({}) does not hold [{}, {}] ({})", shape_str(cols.shape()),
              dtype_name(cols.dtype()), k + (w.ones_row ? 1 : 0), n, dtype_name(x.dtype()));
  if (total == 0) return;
  const Im2colArgs a{.channels = channels,
                     .height = height,
                     .width = width,
                     .kernel_h = w.kernel_h,
                     .kernel_w = w.kernel_w,
                     .first_row = w.first_row,
                     .out_w = w.out_w,
                     .stride = w.stride,
                     .pad_top = w.padding.top,
                     .pad_left = w.padding.left,
                     .k = k,
                     .n = n,
                     .ones_row = w.ones_row};
  const int64_t image_offset = w.image * channels * height * width;
  const unsigned grid = grid_for(total, kThreads);
  cudaStream_t stream = current_stream();
  if (bf16) {
    im2col<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(cols.data_ptr()),
                                          static_cast<const __nv_bfloat16*>(x.data_ptr()) + image_offset, a);
  } else {
    im2col<<<grid, kThreads, 0, stream>>>(cols.data<float>(), x.data<float>() + image_offset, a);
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace conv2d_im2col_device

void register_conv2d_im2col() { im2col_kernels.set_kernel(DeviceType::cuda, conv2d_im2col_device::im2col_kernel); }

}  // namespace titan::ops::cuda
