// ops::group_norm (ops/group_norm.h) against its formula in float64, written
// here: 4-d and 3-d inputs, groups of several channels, weight and bias in
// either dtype, a large common offset (where one-pass sums of squares would
// cancel), f32 and bf16 (bf16-representable inputs, so the formula sees the
// kernel's exact inputs; tolerance: one f32 evaluation, or one bf16 rounding
// of the output).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/group_norm.h"

namespace titan {
namespace group_norm_test {

using testing::random_cpu;

std::vector<double> doubles(const Tensor& t) {
  const std::vector<float> f = t.to(DType::f32).to_floats();
  return {f.begin(), f.end()};
}

// (x - mean) / sqrt(var + eps) * w + b over each (sample, group), var biased.
Tensor formula(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  const std::vector<double> xs = doubles(x), ws = doubles(weight), bs = doubles(bias);
  const int64_t batch = x.size(0), channels = x.size(1), positions = x.numel() / (batch * channels);
  const int64_t per_group = channels / groups, size = per_group * positions;
  std::vector<float> y(xs.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = (b * channels + g * per_group) * positions;
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < size; ++i) mean += xs[first + i];
      mean /= static_cast<double>(size);
      for (int64_t i = 0; i < size; ++i) var += (xs[first + i] - mean) * (xs[first + i] - mean);
      var /= static_cast<double>(size);
      for (int64_t i = 0; i < size; ++i) {
        const int64_t c = g * per_group + i / positions;
        y[first + i] = static_cast<float>((xs[first + i] - mean) / std::sqrt(var + eps) * ws[c] + bs[c]);
      }
    }
  }
  return Tensor::from_floats(y, x.shape());
}

class GroupNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(GroupNormTest, MatchesTheFormula) {
  const DType dtype = GetParam();
  struct Case {
    Shape shape;
    int64_t groups;
    double offset;
    DType affine_dtype;
  };
  const std::vector<Case> all = {{{2, 6, 5, 3}, 3, 0.0, dtype},
                                 {{2, 8, 7}, 4, 0.0, DType::f32},
                                 {{1, 4, 9, 5}, 1, 0.0, dtype},
                                 {{2, 6, 5, 3}, 2, 64.0, dtype}};
  uint64_t seed = 200;
  for (const Case& c : all) {
    SCOPED_TRACE(shape_str(c.shape));
    // bf16 holds 64 + u exactly only to 2^-1; the offset case draws within that grid.
    const Tensor x = random_cpu(c.shape, dtype, ++seed, c.offset - 2, c.offset + 2);
    const Tensor w = random_cpu({c.shape[1]}, c.affine_dtype, ++seed, 0.5, 1.5);
    const Tensor b = random_cpu({c.shape[1]}, c.affine_dtype, ++seed);
    const Tensor y = ops::group_norm(x, c.groups, w, b, 1e-6f);
    testing::expect_matches_reference(y, formula(x, c.groups, w, b, 1e-6), dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, GroupNormTest, ::testing::Values(DType::f32, DType::bf16));

// The groups are groups: one group over all channels is another normalisation.
TEST(GroupNorm, GroupsMatter) {
  const Tensor x = random_cpu({1, 4, 3, 3}, DType::f32, 5, -1, 3);
  const Tensor w = Tensor::full({4}, 1.0), b = Tensor::full({4}, 0.0);
  EXPECT_GT(testing::max_abs(ops::sub(ops::group_norm(x, 2, w, b, 1e-6f), ops::group_norm(x, 1, w, b, 1e-6f))), 1e-2);
}

TEST(GroupNorm, BadArgumentsNameTheOp) {
  const Tensor x = random_cpu({1, 6, 2, 2}, DType::f32, 6);
  const Tensor w = Tensor::full({6}, 1.0), b = Tensor::full({6}, 0.0);
  testing::expect_error([&] { ops::group_norm(x, 4, w, b, 1e-6f); }, {"group_norm", "6 channels", "4 groups"});
  testing::expect_error([&] { ops::group_norm(x, 3, Tensor::full({5}, 1.0), b, 1e-6f); },
                        {"group_norm", "weight", "[5]"});
}

}  // namespace group_norm_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace group_norm_cuda_test {

// The CUDA kernel (ops/cuda/group_norm.cu) has the CPU's arithmetic (f64
// two-pass statistics, the output in f32 rounded once), summed in another
// order: within the CPU tests' tolerance of the CPU result. The cases: the CPU
// tests' shapes, weight and bias in different dtypes, a large common offset,
// groups of thousands of elements per block (FLUX's 32 groups), and more
// (sample, group) blocks than one grid launches (grid-strided).
class CudaGroupNorm : public ::testing::TestWithParam<DType> {};

TEST_P(CudaGroupNorm, MatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  struct Case {
    Shape shape;
    int64_t groups;
    double offset;
    DType weight_dtype, bias_dtype;
  };
  const DType other = dtype == DType::f32 ? DType::bf16 : DType::f32;
  const std::vector<Case> all = {{{2, 6, 5, 3}, 3, 0.0, dtype, dtype},
                                 {{2, 8, 7}, 4, 0.0, DType::f32, DType::f32},
                                 {{1, 4, 9, 5}, 1, 0.0, dtype, other},
                                 {{2, 6, 5, 3}, 2, 64.0, other, dtype},
                                 {{1, 128, 24, 20}, 32, 0.0, DType::f32, DType::f32},
                                 {{2, 64, 16, 16}, 32, 64.0, dtype, dtype},
                                 {{35000, 2, 3}, 2, 0.0, dtype, dtype}};
  uint64_t seed = 500;
  for (const Case& c : all) {
    SCOPED_TRACE(shape_str(c.shape) + " in " + std::to_string(c.groups) + " groups");
    const Tensor x = random_cpu(c.shape, dtype, ++seed, c.offset - 2, c.offset + 2);
    const Tensor w = random_cpu({c.shape[1]}, c.weight_dtype, ++seed, 0.5, 1.5);
    const Tensor b = random_cpu({c.shape[1]}, c.bias_dtype, ++seed);
    const Tensor want = ops::group_norm(x, c.groups, w, b, 1e-6f);
    const Tensor got = ops::group_norm(on_cuda(x), c.groups, on_cuda(w), on_cuda(b), 1e-6f);
    EXPECT_EQ(got.device().type, DeviceType::cuda);
    expect_matches_reference(on_cpu(got), want, dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaGroupNorm, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace group_norm_cuda_test
}  // namespace titan::testing
