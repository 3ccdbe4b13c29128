// The grouped GEMM against a plain per-expert reference: products in double
// written here, and titan's own per-expert loop (F::looped_grouped_gemm,
// ordinary GEMMs), bitwise on integer-valued operands where any summation
// order gives the same bits; experts with no rows and all rows on one
// expert; f32 and bf16; the differentiable function against finite
// differences.
//
// CUDA grouped GEMM against the CPU kernel: bitwise on integer-valued
// operands, whose sums are exact in any order; within rounding
// (support/cuda_compare.h) on random ones; experts with no rows, every row on
// one expert, counts on tile edges.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "support/cuda.h"
#include "support/cuda_compare.h"
#include "support/gradcheck.h"
#include "titan/autograd/engine.h"
#include "titan/nn/functional.h"
#include "titan/ops/grouped_gemm.h"

namespace titan {
namespace grouped_gemm_test {

// Integer values in [-3, 3]: products and sums exact in f32 (and in bf16 operands).
Tensor small_integers(const Shape& shape, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> value(-3, 3);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = static_cast<float>(value(random));
  return Tensor::from_floats(values, shape);
}

Tensor counts_of(const std::vector<int64_t>& counts) {
  return Tensor::from_vector(counts, {static_cast<int64_t>(counts.size())});
}

// y_e = x_e @ w[e]^T in double.
std::vector<double> reference_forward(const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<int64_t>& counts, int64_t out, int64_t in) {
  std::vector<double> y;
  int64_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    for (int64_t r = 0; r < counts[e]; ++r, ++row) {
      for (int64_t o = 0; o < out; ++o) {
        double sum = 0.0;
        for (int64_t i = 0; i < in; ++i) {
          sum += double{x[static_cast<size_t>(row * in + i)]} * w[(e * static_cast<size_t>(out) + o) * in + i];
        }
        y.push_back(sum);
      }
    }
  }
  return y;
}

struct Case {
  std::vector<int64_t> counts;
  const char* what;
};

TEST(GroupedGemm, ForwardMatchesPerExpertReferenceForAnyRouting) {
  const int64_t in = 24, out = 40;
  for (const Case& c : {Case{{5, 0, 13, 1, 300, 7}, "mixed, one expert empty, one past a task block"},
                        Case{{0, 0, 57, 0}, "every row on one expert"}, Case{{0, 0, 0}, "no rows at all"}}) {
    SCOPED_TRACE(c.what);
    const int64_t rows = std::accumulate(c.counts.begin(), c.counts.end(), int64_t{0});
    const auto experts = static_cast<int64_t>(c.counts.size());
    std::mt19937 random(1);
    std::normal_distribution<float> normal;
    std::vector<float> xv(static_cast<size_t>(rows * in)), wv(static_cast<size_t>(experts * out * in));
    for (float& v : xv) v = normal(random);
    for (float& v : wv) v = normal(random);
    const Tensor y = ops::grouped_gemm(Tensor::from_floats(xv, {rows, in}), Tensor::from_floats(wv, {experts, out, in}),
                                       counts_of(c.counts));
    ASSERT_EQ(y.shape(), (Shape{rows, out}));
    const std::vector<float> got = y.to_floats();
    const std::vector<double> want = reference_forward(xv, wv, c.counts, out, in);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  }
}

// Integer operands make every summation order exact: the grouped GEMM and the
// loop of ordinary GEMMs must agree bit for bit, forward and both backwards.
TEST(GroupedGemm, EqualsThePerExpertLoopBitwiseOnExactOperands) {
  const std::vector<int64_t> counts{3, 0, 290, 9, 1};
  const int64_t rows = 303, in = 32, out = 48, experts = 5;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto run = [&](bool grouped) {
      Tensor x = small_integers({rows, in}, 2).to(dtype).set_requires_grad(true);
      Tensor w = small_integers({experts, out, in}, 3).to(dtype).set_requires_grad(true);
      const Tensor c = counts_of(counts);
      const Tensor y = grouped ? F::grouped_gemm(x, w, c) : F::looped_grouped_gemm(x, w, c);
      autograd::backward({F::sum(F::mul(y, small_integers({rows, out}, 4).to(dtype)))});
      return std::vector<std::vector<float>>{y.to_floats(), x.grad().to_floats(), w.grad().to_floats()};
    };
    const auto grouped = run(true), looped = run(false);
    EXPECT_EQ(grouped[0], looped[0]) << "forward";
    EXPECT_EQ(grouped[1], looped[1]) << "input gradient";
    EXPECT_EQ(grouped[2], looped[2]) << "weight gradient (zero for the empty expert)";
  }
}

TEST(GroupedGemm, GradientsPassFiniteDifferences) {
  const Tensor counts = counts_of({2, 0, 4, 1});
  EXPECT_TRUE(
      testing::check_gradients([&](const std::vector<Tensor>& in) { return F::grouped_gemm(in[0], in[1], counts); },
                               {testing::random_leaf({7, 5}, 5), testing::random_leaf({4, 6, 5}, 6)}));
}

TEST(GroupedGemm, BadShapesAreClearErrors) {
  EXPECT_THROW(ops::grouped_gemm(Tensor::zeros({4, 3}), Tensor::zeros({2, 5, 4}), counts_of({2, 2})), Error);
  EXPECT_THROW(ops::grouped_gemm(Tensor::zeros({4, 3}), Tensor::zeros({2, 5, 3}), counts_of({2, 2, 0})), Error);
  // Counts that do not add up to the rows are refused by the kernel.
  EXPECT_THROW(ops::grouped_gemm(Tensor::zeros({4, 3}), Tensor::zeros({2, 5, 3}), counts_of({1, 2})), Error);
}

}  // namespace grouped_gemm_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace grouped_gemm_test {

Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32) {
  return Tensor::from_floats(values, shape).to(dtype);
}

// ---- grouped GEMM -----------------------------------------------------------

Tensor counts_of(const std::vector<int64_t>& counts) {
  return Tensor::from_vector(counts, {static_cast<int64_t>(counts.size())});
}

// Integer values in [-3, 3]: every product and sum below is exact in f32.
Tensor small_integers(const Shape& shape, uint32_t seed, DType dtype) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> value(-3, 3);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = static_cast<float>(value(random));
  return from_floats(values, shape, dtype);
}

Tensor absolute(const Tensor& t) {
  std::vector<float> values = t.to_floats();
  for (float& v : values) v = std::fabs(v);
  return from_floats(values, t.shape(), t.dtype());
}

struct GemmCase {
  std::vector<int64_t> counts;
  const char* what;
};
const GemmCase kGemmCases[] = {{{3, 0, 290, 9, 1}, "mixed, one expert empty"},
                               {{0, 0, 57, 0}, "every row on one expert"},
                               {{64, 64, 1, 0, 128}, "counts on tile edges"},
                               {{0, 0, 0}, "no rows at all"}};

// Integer operands: sums are exact whatever their order, so the GPU must give
// the CPU's bits, forward and both backwards (zeros for experts with no rows).
TEST(CudaGroupedGemm, MatchesCpuBitwiseOnExactOperands) {
  TITAN_REQUIRE_CUDA();
  const int64_t in = 72, out = 40;  // not multiples of the 64-wide tiles
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const GemmCase& c : kGemmCases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + c.what);
      const int64_t rows = std::accumulate(c.counts.begin(), c.counts.end(), int64_t{0});
      const auto experts = static_cast<int64_t>(c.counts.size());
      const Tensor x = small_integers({rows, in}, 40, dtype), w = small_integers({experts, out, in}, 41, dtype);
      const Tensor grad_y = small_integers({rows, out}, 42, dtype), counts = counts_of(c.counts);
      const Tensor dx = on_cuda(x), dw = on_cuda(w), dgrad_y = on_cuda(grad_y), dcounts = on_cuda(counts);
      EXPECT_TRUE(same_bits(ops::grouped_gemm(dx, dw, dcounts), ops::grouped_gemm(x, w, counts))) << "forward";
      EXPECT_TRUE(same_bits(ops::grouped_gemm_input_grad(dgrad_y, dw, dcounts),
                            ops::grouped_gemm_input_grad(grad_y, w, counts)))
          << "input gradient";
      EXPECT_TRUE(same_bits(ops::grouped_gemm_weight_grad(dgrad_y, dx, dcounts),
                            ops::grouped_gemm_weight_grad(grad_y, x, counts)))
          << "weight gradient";
    }
  }
}

// Random operands: each output is an n-term dot product (n = in, out, or the
// expert's rows), so the backends differ by at most 2 * n * u * S, where S is
// the same product of the operands' absolute values.
TEST(CudaGroupedGemm, MatchesCpuWithinRoundingOnRandomOperands) {
  TITAN_REQUIRE_CUDA();
  const std::vector<int64_t> count_list{5, 0, 130, 1, 64, 77};
  const int64_t in = 96, out = 80, experts = 6;
  const int64_t rows = std::accumulate(count_list.begin(), count_list.end(), int64_t{0});
  const int64_t longest = *std::max_element(count_list.begin(), count_list.end());
  const Tensor counts = counts_of(count_list), dcounts = on_cuda(counts);
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random_cpu({rows, in}, dtype, 43), w = random_cpu({experts, out, in}, dtype, 44);
    const Tensor grad_y = random_cpu({rows, out}, dtype, 45);
    const auto check = [&](const Tensor& actual, const Tensor& expected, const Tensor& scale, int64_t terms) {
      std::vector<double> bound;
      for (float s : scale.to_floats()) bound.push_back(2.02 * static_cast<double>(terms) * kUnit * s);
      add_bf16_step(bound, expected);
      return within(actual, expected, bound);
    };
    EXPECT_TRUE(check(ops::grouped_gemm(on_cuda(x), on_cuda(w), dcounts), ops::grouped_gemm(x, w, counts),
                      ops::grouped_gemm(absolute(x), absolute(w), counts), in))
        << "forward";
    EXPECT_TRUE(check(ops::grouped_gemm_input_grad(on_cuda(grad_y), on_cuda(w), dcounts),
                      ops::grouped_gemm_input_grad(grad_y, w, counts),
                      ops::grouped_gemm_input_grad(absolute(grad_y), absolute(w), counts), out))
        << "input gradient";
    EXPECT_TRUE(check(ops::grouped_gemm_weight_grad(on_cuda(grad_y), on_cuda(x), dcounts),
                      ops::grouped_gemm_weight_grad(grad_y, x, counts),
                      ops::grouped_gemm_weight_grad(absolute(grad_y), absolute(x), counts), longest))
        << "weight gradient";
  }
}

TEST(CudaGroupedGemm, CountsOnTheHostAreAnError) {
  TITAN_REQUIRE_CUDA();
  const Tensor x = on_cuda(random_cpu({4, 3}, DType::f32, 46)), w = on_cuda(random_cpu({2, 5, 3}, DType::f32, 47));
  EXPECT_THROW(ops::grouped_gemm(x, w, counts_of({2, 2})), Error);
}

}  // namespace grouped_gemm_test
}  // namespace titan::testing
