// The CPU's fast float8 GEMM paths against their plain twins:
//  - float8_scaled_mm with the scales as oneDNN post-ops (AVX-512 CPUs, where
//    oneDNN has a bf16 matmul) against the f32 GEMM followed by the
//    unscaling kernel, which is what it replaces;
//  - the rowwise Linear, whose power-of-two-scaled operands reach the GEMMs
//    dequantized, against the GEMMs of the cast values with their per-row
//    scales applied after.
// Both twins accumulate the same exact products in f32 (possibly in another
// order inside oneDNN) and round once, so they agree to the output's last
// bit or so: 1e-6 relative in f32, one bf16 rounding (2^-8) in bf16.
#include <gtest/gtest.h>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"
#include "titan/ops/float8.h"
#include "titan/ops/gemm.h"

namespace titan {
namespace float8_scaled_mm_test {

using ops::Float8Cast;
using ops::Float8Format;
using ops::Float8Scaling;

double tolerance(DType dtype) { return dtype == DType::f32 ? 1e-6 : 1.0 / 256; }

// The plain twin: the f32 GEMM, then the unscaling kernel.
Tensor unfused(const Tensor& a, const Tensor& a_scale, const Tensor& b, const Tensor& b_scale, DType out_dtype) {
  const Tensor acc = ops::matmul(a, b, DType::f32);
  Tensor out = Tensor::empty(acc.shape(), out_dtype);
  ops::float8_unscale_kernels(Device::cpu(), out, acc, a_scale, b_scale);
  return out;
}

TEST(Float8ScaledMm, ScalesAsPostOpsEqualTheF32GemmThenUnscaling) {
  if (!ops::float8_scaled_gemm_kernels.has_kernel(DeviceType::cpu)) {
    GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (no AVX-512): float8_scaled_mm always unscales after";
  }
  const Tensor x = testing::random_cpu({64, 96}, DType::f32, 1, -3.0, 3.0);
  const Tensor w = testing::random_cpu({80, 96}, DType::f32, 2, -0.1, 0.1);
  const ops::Float8Operand a = ops::float8_cast(x, Float8Cast{}, 1);
  const ops::Float8Operand tensorwise = ops::float8_cast(w, Float8Cast{}, 1);
  const ops::Float8Operand per_column =
      ops::float8_cast(w, Float8Cast{Float8Scaling::axiswise, Float8Format::e4m3, false}, 1);
  for (const DType out_dtype : {DType::f32, DType::bf16}) {
    for (const auto& [a_scale, b] : std::vector<std::pair<Tensor, ops::Float8Operand>>{
             {a.scale, tensorwise}, {a.scale, per_column}, {Tensor(), per_column}}) {
      SCOPED_TRACE(std::string(dtype_name(out_dtype)) + (a_scale.defined() ? " a scaled" : " a unscaled") +
                   (b.scale.numel() == 1 ? ", b tensorwise" : ", b per column"));
      // b is W^T: a transposed view, as the Linear's forward hands it over.
      const Tensor bt = b.values.transpose(0, 1);
      const Tensor fused = ops::float8_scaled_mm(a.values, a_scale, bt, b.scale, out_dtype);
      const Tensor plain = unfused(a.values, a_scale, bt, b.scale, out_dtype);
      EXPECT_TRUE(
          testing::all_close(fused, plain, tolerance(out_dtype) * testing::max_abs(plain), tolerance(out_dtype)));
    }
  }
}

TEST(Float8Linear, RowwiseOperandsDequantizedGiveTheScaledGemmsNumbers) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = testing::random_cpu({64, 96}, dtype, 3, -3.0, 3.0),
                 w = testing::random_cpu({80, 96}, dtype, 4, -0.1, 0.1);
    const Tensor gy = testing::random_cpu({64, 80}, dtype, 5);
    Tensor xg = x.detach(), wg = w.detach();
    xg.set_requires_grad(true);
    wg.set_requires_grad(true);
    const Tensor y = F::float8_linear(xg, wg, Tensor(), nn::float8_linear_recipe("rowwise"));
    autograd::backward({y}, {gy});
    // The twin: each GEMM on the cast values, the per-slice scales applied after.
    const Float8Cast rowwise{Float8Scaling::axiswise, Float8Format::e4m3, true};
    const auto scaled = [&](const Tensor& left, int64_t left_axis, const Tensor& right, int64_t right_axis) {
      const ops::Float8Operand a = ops::float8_cast(left, rowwise, left_axis),
                               b = ops::float8_cast(right, rowwise, right_axis);
      return unfused(a.values, a.scale, b.values, b.scale, dtype);
    };
    const Tensor y_twin =
        unfused(ops::float8_cast(x, rowwise, 1).values, ops::float8_cast(x, rowwise, 1).scale,
                ops::float8_cast(w, rowwise, 1).values.transpose(0, 1), ops::float8_cast(w, rowwise, 1).scale, dtype);
    const Tensor gx_twin = scaled(gy, 1, w, 0);
    // gy^T [80, 64] cast down the tokens: the gradient's columns are its rows here.
    const ops::Float8Operand gt = ops::float8_cast(gy, rowwise, 0), xt = ops::float8_cast(x, rowwise, 0);
    const Tensor gw_twin = unfused(gt.values.transpose(0, 1), gt.scale, xt.values, xt.scale, dtype);
    for (const auto& [actual, expected] :
         std::vector<std::pair<Tensor, Tensor>>{{y, y_twin}, {xg.grad(), gx_twin}, {wg.grad(), gw_twin}}) {
      EXPECT_TRUE(
          testing::all_close(actual, expected, tolerance(dtype) * testing::max_abs(expected), tolerance(dtype)));
    }
  }
}

}  // namespace float8_scaled_mm_test
}  // namespace titan
