// 2-d convolution, forward only (the FLUX autoencoder runs frozen): NCHW
// input x [B, Cin, H, W], weight [Cout, Cin, kh, kw], optional bias [Cout],
// one stride for both axes and zero padding given per side, so that the
// autoencoder's asymmetric (0, 1, 0, 1) downsampling pad costs no copy:
//   y[b, o, i, j] = bias[o] + sum_{c,u,v} w[o, c, u, v] x[b, c, i s + u - top, j s + v - left]
// with x zero outside the image, Ho = (H + top + bottom - kh) / s + 1 (floor).
//
// Composed of an im2col kernel per backend and the ops::gemm path: each
// image's window columns [Cin kh kw (+1), rows Wo] are multiplied by the
// weight [Cout, Cin kh kw (+1)]. With a bias the columns get a last row of
// ones and the weight a last column of the bias, so the bias joins the
// GEMM's f32 accumulation and a bf16 output is rounded once. Blocks of output
// rows bound the column scratch (a 1024 x 1024 image's first 3x3 conv at 128
// channels would need 1.2 G elements whole). Kernels: CPU (every kernel
// set) and CUDA (ops/cuda/conv2d_im2col.cu: one thread per column element,
// the CPU's columns bit for bit), the GEMM cuBLASLt's. The CUDA kernel is
// written and compiles, but has not yet run on a GPU (its tests,
// tests/ops/conv2d_test.cpp's CudaConv2d, skip without one).
#pragma once

#include <cstdint>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

struct Conv2dPadding {
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  static Conv2dPadding same_on_every_side(int64_t p) { return {p, p, p, p}; }
};

struct Conv2dOptions {
  int64_t stride = 1;
  Conv2dPadding padding = {};
  // Elements of im2col scratch per block of output rows (at least one row is
  // taken whatever the bound): 16 MiB of f32 by default.
  int64_t scratch_elements = int64_t{1} << 22;
};

// x, weight and bias (undefined: none) share a dtype, f32 or bf16; y has it.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options = {});

// What the im2col kernel fills: for image `image` of x, output rows
// [first_row, first_row + rows), cols [K (+1), rows * Wo] in x's dtype with
// K = Cin kh kw ordered (c, u, v) as the weight's flattening, and, when
// ones_row, a last row of ones.
struct Im2colWindow {
  int64_t image = 0, first_row = 0, rows = 0;
  int64_t kernel_h = 0, kernel_w = 0, out_w = 0, stride = 1;
  Conv2dPadding padding = {};
  bool ones_row = false;
};
using Im2colKernel = void(const Tensor& cols, const Tensor& x, const Im2colWindow& window);
inline Op<Im2colKernel> im2col_kernels{"conv2d_im2col"};

}  // namespace titan::ops
