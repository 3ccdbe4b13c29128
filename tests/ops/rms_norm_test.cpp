// RMSNorm, forward and backward, against the float64 PyTorch reference in
// f32 and bf16 (a small and a wide case).
//
// CUDA RMSNorm (forward and backward) against the CPU one on the same inputs,
// in f32 and bf16; row counts below and above the weight-gradient chunk size
// (32 rows, more past 32768 rows) and widths below and above the block size.
//
// Tolerances. The backends reduce in different orders (GPU: a block tree per
// row; CPU: SIMD lanes), so f32 sums agree to ~sqrt(n) ulp:
//  - y, rstd: relative 1e-5 (rstd carries the sum's relative error, halved by
//    the square root; y one more rounding).
//  - grad_x = rstd * (dy*w - xhat * mean(dy*w*xhat)) cancels when the two
//    terms are close; the dot's error is ~1e-6 of its terms: atol 1e-5 of the
//    largest gradient.
//  - grad_weight sums dy * xhat over every row, terms of either sign: its
//    error scales with sqrt(rows) times the terms, not with the (smaller)
//    result: atol 1e-5 of the largest entry.
//  - bf16 outputs: the f32 values above rounded once, so one bf16 ulp (2^-7).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/ops/rms_norm.h"

namespace titan {
namespace rms_norm_test {

using testing::expect_matches_reference;
using testing::ReferenceCase;

class RmsNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(RmsNormTest, MatchesReference) {
  const DType dtype = GetParam();
  for (const char* name : {"rms_norm_small", "rms_norm_wide"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(name);
    const Tensor x = ref.get("x", dtype), w = ref.get("weight", dtype);
    ops::RmsNormOutput out = ops::rms_norm(x, w, static_cast<float>(ref.meta_double("eps")));
    expect_matches_reference(out.y, ref.get("y"), dtype);
    ops::RmsNormGrads grads = ops::rms_norm_backward(ref.get("grad_y", dtype), x, w, out.rstd);
    expect_matches_reference(grads.grad_x, ref.get("grad_x"), dtype);
    expect_matches_reference(grads.grad_weight, ref.get("grad_weight"), dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, RmsNormTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace rms_norm_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace rms_norm_test {

const Shape kShapes[] = {{8}, {1, 8}, {5, 33}, {70, 1000}, {3, 7, 4100}, {2100, 64}, {33000, 24}};
constexpr float kEps = 1e-5f;

void expect_close(const Tensor& cuda_result, const Tensor& cpu_result, double atol_of_max, double rtol) {
  ASSERT_TRUE(cuda_result.device().is_cuda());
  EXPECT_EQ(cuda_result.dtype(), cpu_result.dtype());
  EXPECT_TRUE(all_close(on_cpu(cuda_result), cpu_result, atol_of_max * max_abs(cpu_result), rtol));
}

double rtol_for(DType dtype) { return dtype == DType::bf16 ? 1.0 / 128 : 1e-5; }

class CudaRmsNorm : public ::testing::TestWithParam<DType> {};

TEST_P(CudaRmsNorm, Forward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = random_cpu(shape, dtype, 1, -2.0, 2.0);
    const Tensor w = random_cpu({shape.back()}, dtype, 2, 0.5, 1.5);
    const ops::RmsNormOutput expected = ops::rms_norm(x, w, kEps);
    const ops::RmsNormOutput actual = ops::rms_norm(on_cuda(x), on_cuda(w), kEps);
    expect_close(actual.y, expected.y, 0.0, rtol_for(dtype));
    expect_close(actual.rstd, expected.rstd, 0.0, 1e-5);
  }
}

// Both backends get the same rstd (the CPU's), so only the backward differs.
TEST_P(CudaRmsNorm, Backward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = random_cpu(shape, dtype, 3, -2.0, 2.0);
    const Tensor w = random_cpu({shape.back()}, dtype, 4, 0.5, 1.5);
    const Tensor grad_y = random_cpu(shape, dtype, 5);
    const Tensor rstd = ops::rms_norm(x, w, kEps).rstd;
    const ops::RmsNormGrads expected = ops::rms_norm_backward(grad_y, x, w, rstd);
    const ops::RmsNormGrads actual = ops::rms_norm_backward(on_cuda(grad_y), on_cuda(x), on_cuda(w), on_cuda(rstd));
    expect_close(actual.grad_x, expected.grad_x, 1e-5, rtol_for(dtype));
    expect_close(actual.grad_weight, expected.grad_weight, 1e-5, rtol_for(dtype));
  }
}

// grad_weight is reduced without atomics, so repeated runs agree to the bit.
TEST(CudaRmsNormDeterminism, WeightGradientIsRunToRunIdentical) {
  TITAN_REQUIRE_CUDA();
  const Tensor x = on_cuda(random_cpu({40000, 96}, DType::f32, 6));
  const Tensor w = on_cuda(random_cpu({96}, DType::f32, 7, 0.5, 1.5));
  const Tensor grad_y = on_cuda(random_cpu({40000, 96}, DType::f32, 8));
  const Tensor rstd = ops::rms_norm(x, w, kEps).rstd;
  const Tensor first = on_cpu(ops::rms_norm_backward(grad_y, x, w, rstd).grad_weight);
  for (int run = 0; run < 3; ++run) {
    const Tensor again = on_cpu(ops::rms_norm_backward(grad_y, x, w, rstd).grad_weight);
    ASSERT_EQ(std::memcmp(again.data_ptr(), first.data_ptr(), first.nbytes()), 0) << "run " << run;
  }
}

// No rows: grad_weight is zeros (and nothing else is touched).
TEST(CudaRmsNormEdge, EmptyBatchGivesZeroWeightGradient) {
  TITAN_REQUIRE_CUDA();
  const Tensor x = Tensor::empty({0, 16}, DType::f32, Device::cuda());
  const Tensor w = on_cuda(random_cpu({16}, DType::f32, 9));
  const ops::RmsNormOutput out = ops::rms_norm(x, w, kEps);
  const ops::RmsNormGrads grads = ops::rms_norm_backward(x, x, w, out.rstd);
  EXPECT_EQ(on_cpu(grads.grad_weight).to_floats(), std::vector<float>(16, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaRmsNorm, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace rms_norm_test
}  // namespace titan::testing
