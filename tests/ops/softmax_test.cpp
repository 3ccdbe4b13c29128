// Softmax over the last dim, forward and backward, against the float64
// PyTorch reference in f32 and bf16.
//
// CUDA softmax (forward and backward) against the CPU one on the same inputs,
// in f32 and bf16, for row lengths below, at and well above the block size.
//
// Tolerances. The two backends sum a row in different orders and use
// different exp implementations (each ~2 ulp):
//  - f32 forward: every output is exp(x - max) / sum, relative error a few
//    ulp from exp plus the sum's rounding (~sqrt(cols) ulp for random data,
//    ~50 ulp at 4099 columns): rtol 1e-5.
//  - f32 backward: y * (dy - dot) cancels when dy ~ dot; dot's error is
//    ~1e-6 relative to the row's |dy|, so atol 1e-5 of the largest gradient.
//  - bf16: the f32 results above, rounded once to bf16, differ by at most one
//    bf16 ulp (2^-7 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace softmax_test {

using testing::expect_matches_reference;
using testing::ReferenceCase;

class SoftmaxTest : public ::testing::TestWithParam<DType> {};

TEST_P(SoftmaxTest, MatchesReference) {
  const DType dtype = GetParam();
  ReferenceCase ref("softmax");
  const Tensor y = ops::softmax(ref.get("x", dtype));
  expect_matches_reference(y, ref.get("y"), dtype);
  expect_matches_reference(ops::softmax_backward(ref.get("grad_y", dtype), ref.get("y", dtype)), ref.get("grad_x"),
                           dtype);
}

INSTANTIATE_TEST_SUITE_P(DTypes, SoftmaxTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace softmax_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace softmax_test {

const Shape kShapes[] = {{}, {1, 1}, {7, 1}, {3, 5}, {37, 1000}, {4, 4099}, {2, 3, 129}, {1000, 17}};

void expect_close(const Tensor& cuda_result, const Tensor& cpu_result, double atol, double rtol) {
  ASSERT_TRUE(cuda_result.device().is_cuda());
  EXPECT_EQ(cuda_result.dtype(), cpu_result.dtype());
  EXPECT_TRUE(all_close(on_cpu(cuda_result), cpu_result, atol, rtol));
}

double rtol_for(DType dtype) { return dtype == DType::bf16 ? 1.0 / 128 : 1e-5; }

class CudaSoftmax : public ::testing::TestWithParam<DType> {};

TEST_P(CudaSoftmax, Forward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor x = random_cpu(shape, dtype, 1, -8.0, 8.0);
    const Tensor expected = ops::softmax(x);
    expect_close(ops::softmax(on_cuda(x)), expected, 1e-7 * max_abs(expected), rtol_for(dtype));
  }
}

TEST_P(CudaSoftmax, Backward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor y = ops::softmax(random_cpu(shape, dtype, 2, -4.0, 4.0));
    const Tensor grad_y = random_cpu(shape, dtype, 3);
    const Tensor expected = ops::softmax_backward(grad_y, y);
    expect_close(ops::softmax_backward(on_cuda(grad_y), on_cuda(y)), expected, 1e-5 * max_abs(expected),
                 rtol_for(dtype));
  }
}

// Masked scores: -inf entries get probability 0, and a fully masked row is
// zeros rather than NaN, on both backends.
TEST_P(CudaSoftmax, MaskedRows) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = random_cpu({3, 600}, DType::f32, 4, -4.0, 4.0).to_floats();
  for (int64_t c = 0; c < 600; ++c) values[static_cast<size_t>(c)] = -inf;           // row 0: all masked
  for (int64_t c = 0; c < 600; c += 3) values[static_cast<size_t>(600 + c)] = -inf;  // row 1: partly masked
  const Tensor x = Tensor::from_floats(values, {3, 600}, dtype);
  const Tensor expected = ops::softmax(x);
  const Tensor actual = on_cpu(ops::softmax(on_cuda(x)));
  EXPECT_TRUE(all_close(actual, expected, 1e-7, rtol_for(dtype)));
  const std::vector<float> result = actual.to_floats();
  for (int64_t c = 0; c < 600; ++c) ASSERT_EQ(result[static_cast<size_t>(c)], 0.0f) << c;
  for (int64_t c = 0; c < 600; c += 3) ASSERT_EQ(result[static_cast<size_t>(600 + c)], 0.0f) << c;
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaSoftmax, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace softmax_test
}  // namespace titan::testing
