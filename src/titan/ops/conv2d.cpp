#include "titan/ops/conv2d.h"

#include <algorithm>

#include "titan/core/copy.h"
#include "titan/core/trace_context.h"
#include "titan/ops/checks.h"
#include "titan/ops/gemm.h"

namespace titan::ops {
namespace conv2d_checks {

void check(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  const char* op = "conv2d";
  check_defined(op, x, "x");
  check_defined(op, weight, "weight");
  check_rank(op, x, 4, "x [B, Cin, H, W]");
  check_rank(op, weight, 4, "weight [Cout, Cin, kh, kw]");
  check_dtype(op, x, {DType::f32, DType::bf16}, "x");
  check_same_dtype(op, x, weight);
  check_same_device(op, x, weight);
  TITAN_CHECK(weight.size(1) == x.size(1) && weight.size(0) > 0 && weight.size(2) > 0 && weight.size(3) > 0,
              "conv2d: weight is {}, expected [Cout, {}, kh, kw] for x {}", shape_str(weight.shape()), x.size(1),
              shape_str(x.shape()));
  if (bias.defined()) {
    TITAN_CHECK(bias.shape() == Shape{weight.size(0)}, "conv2d: bias is {}, expected [{}]", shape_str(bias.shape()),
                weight.size(0));
    check_same_dtype(op, x, bias);
    check_same_device(op, x, bias);
  }
  const Conv2dPadding& p = options.padding;
  TITAN_CHECK(options.stride >= 1 && p.top >= 0 && p.bottom >= 0 && p.left >= 0 && p.right >= 0,
              "conv2d: stride {} must be at least 1 and padding ({}, {}, {}, {}) non-negative", options.stride, p.top,
              p.bottom, p.left, p.right);
  TITAN_CHECK(x.size(2) + p.top + p.bottom >= weight.size(2) && x.size(3) + p.left + p.right >= weight.size(3),
              "conv2d: the {}x{} kernel is larger than the padded {}x{} input", weight.size(2), weight.size(3),
              x.size(2) + p.top + p.bottom, x.size(3) + p.left + p.right);
  TITAN_CHECK(options.scratch_elements > 0, "conv2d: scratch_elements must be positive");
}

// The weight as the GEMM's A [Cout, K (+1)]: flattened, and with the bias as a
// last column when there is one (the columns then have a last row of ones).
Tensor weight_matrix(const Tensor& weight, const Tensor& bias) {
  const int64_t out = weight.size(0), k = weight.size(1) * weight.size(2) * weight.size(3);
  Tensor flat = weight.contiguous().view({out, k});
  if (!bias.defined()) return flat;
  Tensor with_bias = Tensor::empty({out, k + 1}, weight.dtype(), weight.device());
  copy_(with_bias.narrow(1, 0, k), flat);
  copy_(with_bias.narrow(1, k, 1), bias.view({out, 1}));
  return with_bias;
}

}  // namespace conv2d_checks

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  const trace::OpScope op_scope("conv2d");
  conv2d_checks::check(x, weight, bias, options);
  const Conv2dPadding& p = options.padding;
  const int64_t batch = x.size(0), out_channels = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  const int64_t out_h = (x.size(2) + p.top + p.bottom - kh) / options.stride + 1;
  const int64_t out_w = (x.size(3) + p.left + p.right - kw) / options.stride + 1;
  Tensor y = Tensor::empty({batch, out_channels, out_h, out_w}, x.dtype(), x.device());
  if (!has_work(y)) return y;
  const Tensor a = conv2d_checks::weight_matrix(weight, bias), input = x.contiguous();
  const int64_t k = a.size(1);
  const int64_t block_rows = std::clamp<int64_t>(options.scratch_elements / (k * out_w), 1, out_h);
  const Tensor scratch = Tensor::empty({k * block_rows * out_w}, x.dtype(), x.device());
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor image_out = y.select(0, b).view({out_channels, out_h * out_w});
    for (int64_t row = 0; row < out_h; row += block_rows) {
      const int64_t rows = std::min(block_rows, out_h - row);
      // A short last block uses the front of the scratch, contiguous.
      const Tensor block = scratch.narrow(0, 0, k * rows * out_w).view({k, rows * out_w});
      const Im2colWindow window{.image = b,
                                .first_row = row,
                                .rows = rows,
                                .kernel_h = kh,
                                .kernel_w = kw,
                                .out_w = out_w,
                                .stride = options.stride,
                                .padding = p,
                                .ones_row = bias.defined()};
      im2col_kernels(x.device(), block, input, window);
      gemm(a, block, image_out.narrow(1, row * out_w, rows * out_w));
    }
  }
  return y;
}

}  // namespace titan::ops
