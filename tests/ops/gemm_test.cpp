// GEMM against the float64 PyTorch reference, in f32 and bf16, with operands
// passed row-major and as transposed (column-major) views.
#include <gtest/gtest.h>

#include <random>

#include "support/reference.h"
#include "titan/ops/gemm.h"

namespace titan {
namespace {

using testing::ReferenceCase;

class GemmTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(GemmTest, MatchesReference) {
  const auto& [name, dtype] = GetParam();
  ReferenceCase ref("gemm_" + name);
  const Tensor a = ref.get("a", dtype), b = ref.get("b", dtype), expected = ref.get("c");
  const auto tol = testing::tolerance_for(dtype, expected);
  EXPECT_TRUE(testing::all_close(ops::matmul(a, b, DType::f32), expected, tol.atol, tol.rtol));
  // The same product from transposed storage: A^T^T and B^T^T as strided views.
  const Tensor a_t = a.transpose(-1, -2).contiguous().transpose(-1, -2);
  const Tensor b_t = b.transpose(-1, -2).contiguous().transpose(-1, -2);
  EXPECT_TRUE(testing::all_close(ops::matmul(a_t, b_t, DType::f32), expected, tol.atol, tol.rtol));
  // bf16 output: rounded once from the f32 accumulator.
  const Tensor c16 = ops::matmul(a, b, DType::bf16);
  EXPECT_EQ(c16.dtype(), DType::bf16);
  const auto tol16 = testing::tolerance_for(DType::bf16, expected);
  EXPECT_TRUE(testing::all_close(c16, expected, tol16.atol, tol16.rtol));
}

INSTANTIATE_TEST_SUITE_P(Cases, GemmTest,
                         ::testing::Combine(::testing::Values("2d", "batched", "broadcast_b", "long_k"),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
                         });

TEST(Gemm, AlphaBetaAccumulate) {
  ReferenceCase ref("gemm_2d");
  const Tensor a = ref.get("a"), b = ref.get("b"), expected = ref.get("c");
  Tensor c = expected.clone();
  // c = 0.5 * a @ b + 2 * c  ==  2.5 * expected
  ops::gemm(a, b, c, 0.5f, 2.0f);
  std::vector<float> scaled = expected.to_floats();
  for (float& v : scaled) v *= 2.5f;
  const Tensor want = Tensor::from_floats(scaled, expected.shape());
  const auto tol = testing::tolerance_for(DType::f32, want);
  EXPECT_TRUE(testing::all_close(c, want, tol.atol, tol.rtol));
}

// Integer-valued operands small enough that every product and sum is exact in
// f32, so any correct GEMM gives the same bits whatever its summation order.
Tensor small_integers(const Shape& shape, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> value(-3, 3);
  std::vector<float> values(static_cast<size_t>(shape[0] * shape[1]));
  for (float& v : values) v = static_cast<float>(value(random));
  return Tensor::from_floats(values, shape);
}

// bf16 operands large enough that a CPU without oneDNN bf16 matmul (AVX2 and
// older: the ops.avx2 and ops.baseline runs) streams the larger one through
// several f32 panels: rows of A when A is the larger, columns of B (a transposed
// weight view) when B is, with beta accumulating into C. The result must be
// exactly the f32 product, which spot entries recomputed here by plain dot
// products confirm.
TEST(Gemm, LargeBf16OperandsEqualTheExactProduct) {
  for (const auto& [m, k, n] : {std::array<int64_t, 3>{1536, 4096, 768}, std::array<int64_t, 3>{512, 4096, 2048}}) {
    const Tensor a = small_integers({m, k}, 1), weight = small_integers({n, k}, 2);
    const Tensor c_init = small_integers({m, n}, 3);
    Tensor c16 = c_init.clone(), c32 = c_init.clone();
    ops::gemm(a.to(DType::bf16), weight.to(DType::bf16).transpose(0, 1), c16, 0.5f, 2.0f);
    ops::gemm(a, weight.transpose(0, 1), c32, 0.5f, 2.0f);
    const std::vector<float> got = c16.to_floats(), want = c32.to_floats();
    ASSERT_EQ(got, want) << m << "x" << k << "x" << n;
    const std::vector<float> av = a.to_floats(), wv = weight.to_floats(), cv = c_init.to_floats();
    for (int64_t i : {int64_t{0}, m / 2 + 1, m - 1}) {
      for (int64_t j : {int64_t{0}, n / 2 + 3, n - 1}) {
        double dot = 0;
        for (int64_t p = 0; p < k; ++p) dot += double{av[i * k + p]} * double{wv[j * k + p]};
        EXPECT_EQ(got[i * n + j], static_cast<float>(0.5 * dot + 2.0 * cv[i * n + j])) << i << "," << j;
      }
    }
  }
}

TEST(Gemm, EmptyInnerDimension) {
  Tensor a = Tensor::empty({3, 0}), b = Tensor::empty({0, 4});
  Tensor c = Tensor::full({3, 4}, 5.0);
  ops::gemm(a, b, c, 1.0f, 0.0f);
  EXPECT_EQ(c.to_floats(), std::vector<float>(12, 0.0f));
}

TEST(Gemm, ShapeAndDtypeErrorsNameTheOp) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({5, 6});
  try {
    ops::matmul(a, b);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("gemm"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("[3, 4]"), std::string::npos) << error.what();
  }
  EXPECT_THROW(ops::matmul(a, Tensor::zeros({4, 2}, DType::bf16)), Error);
  EXPECT_THROW(ops::matmul(Tensor::zeros({3, 4}, DType::i32), Tensor::zeros({4, 2}, DType::i32)), Error);
}

}  // namespace
}  // namespace titan
