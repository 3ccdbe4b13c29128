// GEMM against the float64 PyTorch reference, in f32 and bf16, with operands
// passed row-major and as transposed (column-major) views.
//
// CUDA GEMM (cuBLASLt) against the CPU backend's (oneDNN) on the same inputs:
// f32 and bf16 operands and outputs, row-major and transposed views, batches
// and broadcast batches, alpha/beta accumulation, unaligned views, odd shapes.
//
// Tolerance: an output element is a K-term f32 sum, and each backend rounds
// its partial sums in its own order, so the two differ by about
// sqrt(K) * 2^-24 times sum_k |a_ik b_kj| (the scale the rounding errors are
// relative to; random-sign terms make the output itself ~sqrt(K) smaller).
// 16x that covers both backends' errors and tensor-core accumulation with a
// wide margin, while one wrong term (~1/K of that sum) is far outside it. A
// bf16 output adds one bf16 ulp (2^-7 relative at most): two nearly equal f32
// values can round to neighbouring bf16 values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/ops/gemm.h"

namespace titan {
namespace gemm_test {

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

}  // namespace gemm_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace gemm_test {

// Elementwise |t| as a contiguous f32 host tensor.
Tensor abs_of(const Tensor& t) {
  std::vector<float> values = t.to_floats();
  for (float& v : values) v = std::fabs(v);
  return Tensor::from_floats(values, t.shape());
}

// An operand on both devices: the same view of the same values.
struct Operand {
  Tensor cpu, cuda;
};

// A matrix (stack) of `shape`, stored transposed when `transposed` (so the
// view has unit stride down its rows, as a transposed weight does).
Operand operand(Shape shape, DType dtype, bool transposed, uint64_t seed) {
  Shape stored = shape;
  if (transposed) std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  const Tensor base = random_cpu(stored, dtype, seed);
  const Tensor device = on_cuda(base);
  if (!transposed) return {base, device};
  return {base.transpose(-1, -2), device.transpose(-1, -2)};
}

struct Case {
  float alpha = 1.0f;
  float beta = 0.0f;
  DType c_dtype = DType::f32;
};

// Runs C = alpha A @ B + beta C on both devices and compares. C starts from
// random values, or NaN when beta is 0 (neither backend may read C then).
// c_padding > 0 makes C a view of wider rows (leading dimension n + padding,
// starting mid-row), whose padding must come through untouched.
void expect_gemm_matches(const Operand& a, const Operand& b, const Shape& c_shape, const Case& c, uint64_t seed,
                         int64_t c_padding = 0) {
  Shape stored = c_shape;
  stored.back() += c_padding;
  const Tensor start =
      c.beta != 0.0f ? random_cpu(stored, c.c_dtype, seed) : Tensor::full(stored, std::nan(""), c.c_dtype);
  const int64_t n = c_shape.back(), offset = c_padding / 2;
  const Tensor expected = start.clone();
  ops::gemm(a.cpu, b.cpu, expected.narrow(-1, offset, n), c.alpha, c.beta);
  const Tensor actual_storage = on_cuda(start);
  ops::gemm(a.cuda, b.cuda, actual_storage.narrow(-1, offset, n), c.alpha, c.beta);
  const Tensor actual = on_cpu(actual_storage);

  // The rounding scale: |alpha| |A| @ |B| + |beta C|, at its largest.
  const int64_t k = a.cpu.size(-1);
  const Tensor magnitude = Tensor::empty(c_shape);
  ops::gemm(abs_of(a.cpu), abs_of(b.cpu), magnitude);
  const std::vector<float> s = magnitude.to_floats(), c0 = start.narrow(-1, offset, n).to_floats();
  double largest = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    const double beta_term = c.beta != 0.0f ? std::fabs(c.beta * c0[i]) : 0.0;
    largest = std::max(largest, std::fabs(c.alpha) * s[i] + beta_term);
  }
  const double atol = 16.0 * std::sqrt(static_cast<double>(k)) * std::ldexp(1.0, -24) * largest;
  const double rtol = c.c_dtype == DType::bf16 ? std::ldexp(1.0, -7) : 0.0;
  EXPECT_TRUE(all_close(actual.narrow(-1, offset, n), expected.narrow(-1, offset, n), atol, rtol))
      << "A " << shape_str(a.cpu.shape()) << " strides " << shape_str(a.cpu.strides()) << " B "
      << shape_str(b.cpu.shape()) << " strides " << shape_str(b.cpu.strides()) << " " << dtype_name(a.cpu.dtype())
      << " -> " << dtype_name(c.c_dtype) << ", alpha " << c.alpha << ", beta " << c.beta << ", C padding " << c_padding;
  if (c_padding > 0) {
    for (const auto& [from, width] : {std::pair<int64_t, int64_t>{0, offset}, {offset + n, c_padding - offset}}) {
      const Tensor got = actual.narrow(-1, from, width).contiguous(), want = start.narrow(-1, from, width).contiguous();
      EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0) << "C's padding was written";
    }
  }
}

class CudaGemmTest : public ::testing::TestWithParam<DType> {};

// 67 x 129 x 33: no dimension a multiple of a tile or of a vector width.
TEST_P(CudaGemmTest, EveryLayoutMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t m = 67, k = 129, n = 33;
  for (bool a_t : {false, true}) {
    for (bool b_t : {false, true}) {
      for (DType c_dtype : {DType::f32, DType::bf16}) {
        const Operand a = operand({m, k}, dtype, a_t, 1), b = operand({k, n}, dtype, b_t, 2);
        expect_gemm_matches(a, b, {m, n}, {1.0f, 0.0f, c_dtype}, 3);
      }
    }
  }
}

TEST_P(CudaGemmTest, AlphaBetaAccumulate) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t m = 67, k = 129, n = 33;
  for (bool a_t : {false, true}) {
    for (DType c_dtype : {DType::f32, DType::bf16}) {
      const Operand a = operand({m, k}, dtype, a_t, 4), b = operand({k, n}, dtype, !a_t, 5);
      expect_gemm_matches(a, b, {m, n}, {0.5f, -1.5f, c_dtype}, 6);
      expect_gemm_matches(a, b, {m, n}, {1.0f, 1.0f, c_dtype}, 7);  // the accumulate the fused loss relies on
    }
  }
}

TEST_P(CudaGemmTest, BatchedAndBroadcastBatches) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t batch = 3, m = 19, k = 45, n = 23;
  struct Shapes {
    Shape a, b;
  };
  const std::vector<Shapes> cases = {{{batch, m, k}, {batch, k, n}},
                                     {{batch, m, k}, {k, n}},
                                     {{m, k}, {batch, k, n}},
                                     {{1, m, k}, {batch, k, n}},
                                     {{batch, m, k}, {1, k, n}}};
  for (const Shapes& shapes : cases) {
    for (bool a_t : {false, true}) {
      for (bool b_t : {false, true}) {
        const Operand a = operand(shapes.a, dtype, a_t, 8), b = operand(shapes.b, dtype, b_t, 9);
        expect_gemm_matches(a, b, {batch, m, n}, {1.0f, 0.0f, DType::f32}, 10);
        expect_gemm_matches(a, b, {batch, m, n}, {2.0f, 0.5f, DType::bf16}, 11);
      }
    }
  }
}

// Views that start mid-buffer (pointers aligned to 2 or 4 bytes, not 256),
// leading dimensions wider than the matrix, and a strided C.
TEST_P(CudaGemmTest, UnalignedViewsAndStridedOutput) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t m = 37, k = 53, n = 29;
  const Tensor a_base = random_cpu({m + 1, k + 3}, dtype, 12), b_base = random_cpu({k + 1, n + 5}, dtype, 13);
  const Tensor a_cuda = on_cuda(a_base), b_cuda = on_cuda(b_base);
  const Operand a{a_base.narrow(0, 1, m).narrow(1, 1, k), a_cuda.narrow(0, 1, m).narrow(1, 1, k)};
  const Operand b{b_base.narrow(0, 1, k).narrow(1, 3, n), b_cuda.narrow(0, 1, k).narrow(1, 3, n)};
  const Operand b_t{b_base.narrow(1, 3, k).narrow(0, 1, n).transpose(0, 1),
                    b_cuda.narrow(1, 3, k).narrow(0, 1, n).transpose(0, 1)};
  for (DType c_dtype : {DType::f32, DType::bf16}) {
    expect_gemm_matches(a, b, {m, n}, {1.0f, 0.0f, c_dtype}, 14);
    expect_gemm_matches(a, b_t, {m, n}, {1.0f, 0.0f, c_dtype}, 15, 7);
    expect_gemm_matches(a, b, {m, n}, {0.5f, 2.0f, c_dtype}, 16, 7);
  }
  // A batched C whose entries are views too.
  const Operand a3 = operand({2, m, k}, dtype, true, 29), b3 = operand({2, k, n}, dtype, false, 30);
  expect_gemm_matches(a3, b3, {2, m, n}, {1.0f, 1.0f, DType::f32}, 31, 5);
}

// Matrix-vector and outer products: single rows or columns, where a stride
// may be anything and the leading dimension has to be made up.
TEST_P(CudaGemmTest, VectorShapes) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  struct Dims {
    int64_t m, k, n;
  };
  for (const Dims d : {Dims{1, 40, 17}, Dims{17, 40, 1}, Dims{23, 1, 19}, Dims{1, 1, 1}, Dims{1, 33, 1}}) {
    for (bool a_t : {false, true}) {
      for (bool b_t : {false, true}) {
        const Operand a = operand({d.m, d.k}, dtype, a_t, 17), b = operand({d.k, d.n}, dtype, b_t, 18);
        expect_gemm_matches(a, b, {d.m, d.n}, {1.0f, 0.0f, DType::f32}, 19);
      }
    }
  }
}

// Big enough for tensor-core kernels, split-K and the workspace.
TEST_P(CudaGemmTest, LargeShapesMatchCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Operand a = operand({384, 1536}, dtype, false, 20), b = operand({1536, 520}, dtype, true, 21);
  expect_gemm_matches(a, b, {384, 520}, {1.0f, 0.0f, DType::f32}, 22);
  expect_gemm_matches(a, b, {384, 520}, {1.0f, 1.0f, dtype}, 23);
  // Long K, small output: where cuBLASLt splits K over blocks.
  const Operand a_long = operand({16, 8192}, dtype, true, 24), b_long = operand({8192, 24}, dtype, false, 25);
  expect_gemm_matches(a_long, b_long, {16, 24}, {1.0f, 0.0f, DType::f32}, 26);
}

// The cached plan gives the same algorithm, so the same bits, every call.
TEST_P(CudaGemmTest, RepeatedCallsGiveTheSameBits) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Operand a = operand({256, 2048}, dtype, false, 27), b = operand({2048, 96}, dtype, true, 28);
  const Tensor first = on_cpu(ops::matmul(a.cuda, b.cuda, DType::f32));
  for (int run = 0; run < 3; ++run) {
    const Tensor again = on_cpu(ops::matmul(a.cuda, b.cuda, DType::f32));
    ASSERT_EQ(std::memcmp(again.data_ptr(), first.data_ptr(), first.nbytes()), 0) << "run " << run;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaGemmTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CudaGemm, EmptyInnerDimensionZeroesC) {
  TITAN_REQUIRE_CUDA();
  const Tensor a = Tensor::empty({3, 0}, DType::f32, Device::cuda()),
               b = Tensor::empty({0, 4}, DType::f32, Device::cuda());
  const Tensor c = on_cuda(Tensor::full({3, 4}, 5.0));
  ops::gemm(a, b, c, 1.0f, 0.0f);
  EXPECT_EQ(on_cpu(c).to_floats(), std::vector<float>(12, 0.0f));
}

}  // namespace gemm_test
}  // namespace titan::testing
