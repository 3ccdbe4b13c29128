// The MoE experts' float8 and MXFP8 grouped GEMMs (F::float8_grouped_gemm,
// ops::float8_fake_quantize_groups):
//  - the per-group fake quantization against float8_cast of each group
//    padded with zero rows (TorchTitan's token-group alignment), bitwise;
//  - forward and both gradients of both recipes against
//    tests/reference/float8_reference.py's grouped_gemm (float64, the casts
//    and the padding written there), in f32 and bf16;
//  - the RCEIL block scale on its boundaries;
//  - the CUDA kernels against the CPU's (CudaFloat8Grouped: skipped, and
//    counted, without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"
#include "titan/ops/float8.h"

namespace titan {
namespace float8_grouped_test {

using ops::Float8Cast;
using ops::Float8Format;
using ops::Float8Scaling;
using testing::ReferenceCase;

// Rows spread over 2^20 in magnitude, with zeros and a whole zero column.
Tensor spread_rows(int64_t rows, int64_t cols, uint32_t seed, DType dtype) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> exponent(-10.0f, 10.0f), mantissa(-2.0f, 2.0f);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (float& v : values) v = std::ldexp(mantissa(engine), static_cast<int>(exponent(engine)));
  for (int64_t r = 0; r < rows; ++r) values[static_cast<size_t>(r * cols + 3)] = 0.0f;
  values[7] = 0.0f;
  return Tensor::from_floats(values, {rows, cols}).to(dtype);
}

std::vector<Float8Cast> grouped_casts() {
  return {nn::float8_grouped_recipe("quantize.grouped_mm.float8", ""),
          nn::float8_grouped_recipe("quantize.grouped_mm.mx", "mxfp8"),
          Float8Cast{Float8Scaling::mx_block, Float8Format::e5m2, true, ops::MxScaleRounding::floor}};
}

// Each group cast on its own, padded with zero rows to a multiple of 32, the
// padding dropped: the grouped kernel's result, bit for bit. Groups that are
// not multiples of 32 (so MX blocks end short), an empty one, one of a row.
TEST(Float8FakeQuantizeGroups, EqualsEachGroupPaddedWithZerosAndCastAlone) {
  const std::vector<int64_t> counts{37, 0, 45, 1, 17};
  const Tensor counts_tensor = Tensor::from_vector<int64_t>(counts, {5});
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = spread_rows(100, 48, 5, dtype);
    for (const Float8Cast& cast : grouped_casts()) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " scaling " << static_cast<int>(cast.scaling) << " "
                                        << ops::float8_format_name(cast.format));
      const std::vector<float> grouped = ops::float8_fake_quantize_groups(x, counts_tensor, cast).to_floats();
      int64_t first = 0;
      for (const int64_t n : counts) {
        if (n == 0) continue;
        const int64_t padded = (n + 31) / 32 * 32;
        std::vector<float> rows(static_cast<size_t>(padded * 48), 0.0f);
        const std::vector<float> real = x.narrow(0, first, n).contiguous().to_floats();
        std::copy(real.begin(), real.end(), rows.begin());
        const Tensor group = Tensor::from_floats(rows, {padded, 48}).to(dtype);
        const std::vector<float> alone = ops::float8_fake_quantize(group, cast, 0).narrow(0, 0, n).to_floats();
        for (int64_t i = 0; i < n * 48; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(grouped[static_cast<size_t>(first * 48 + i)]),
                    std::bit_cast<uint32_t>(alone[static_cast<size_t>(i)]))
              << "row " << first + i / 48 << " column " << i % 48;
        }
        first += n;
      }
    }
  }
}

// A dequantized value is the cast value over its scale, exactly: the scales are powers of two.
TEST(Float8FakeQuantizeGroups, RowwiseValuesAreTheCastOverItsScale) {
  const Tensor x = spread_rows(40, 64, 9, DType::f32);
  const Float8Cast rowwise = nn::float8_grouped_recipe("quantize.grouped_mm.float8", "");
  const ops::Float8Operand cast = ops::float8_cast(x, rowwise, 1);
  const std::vector<float> values = cast.values.to_floats(), scales = cast.scale.to_floats();
  const std::vector<float> fake = ops::float8_fake_quantize(x, rowwise, 1).to_floats();
  for (size_t i = 0; i < fake.size(); ++i) ASSERT_EQ(fake[i], values[i] / scales[i / 64]) << i;
}

TEST(Float8FakeQuantizeGroups, RefusesScalesThatAreNotPowersOfTwoAndCountsThatDoNotAddUp) {
  const Tensor x = Tensor::zeros({8, 32}, DType::f32);
  testing::expect_error(
      [&] { ops::float8_fake_quantize_groups(x, Tensor::from_vector<int64_t>({8}, {1}), Float8Cast{}); },
      {"power-of-two"});
  const Float8Cast rowwise{Float8Scaling::axiswise, Float8Format::e4m3, true};
  testing::expect_error(
      [&] {
        ops::float8_fake_quantize_groups(x, Tensor::from_vector<int64_t>({3, 4}, {2}), rowwise);
      },
      {"add up to 7 rows, x has 8"});
  testing::expect_error([&] { nn::float8_grouped_recipe("quantize.grouped_mm.mx", "mxfp8_cublas"); },
                        {"quantize.grouped_mm.mx.recipe_name", "'mxfp8_cublas'"});
}

// RCEIL's scale is the smallest power of two keeping the block within 448:
// a block whose amax is exactly 448 * 2^k keeps scale 2^k (its largest value
// stays 448), one a step above it moves to 2^(k+1); FLOOR keeps 2^(k+0)
// and saturates nothing either way but rounds differently.
TEST(Float8FakeQuantizeGroups, RceilScaleIsTheSmallestPowerOfTwoAboveAmaxOverMax) {
  const Float8Cast rceil = nn::float8_grouped_recipe("quantize.grouped_mm.mx", "mxfp8");
  for (const int k : {-20, 0, 5}) {
    SCOPED_TRACE(k);
    const float exact = std::ldexp(448.0f, k), above = std::nextafter(exact, 1e30f);
    std::vector<float> row(32, 0.0f);
    row[0] = exact;
    row[1] = std::ldexp(1.0f, k);  // 1 at scale 2^k: kept
    ops::Float8Operand cast = ops::float8_cast(Tensor::from_floats(row, {1, 32}), rceil, 1);
    EXPECT_EQ(cast.scale.to_ints()[0], 127 + k);
    EXPECT_EQ(cast.values.to_floats()[0], exact);
    row[0] = above;
    cast = ops::float8_cast(Tensor::from_floats(row, {1, 32}), rceil, 1);
    EXPECT_EQ(cast.scale.to_ints()[0], 127 + k + 1);
    EXPECT_EQ(cast.values.to_floats()[0], exact);  // above / 2^(k+1) = 224.0..., on the grid at 224
  }
}

struct GroupedCase {
  std::string recipe;  // the reference's name: rowwise (quantize.grouped_mm.float8) or mxfp8
  DType dtype;
};

void PrintTo(const GroupedCase& c, std::ostream* out) { *out << c.recipe << " " << dtype_name(c.dtype); }

class Float8GroupedReference : public ::testing::TestWithParam<GroupedCase> {};

// Forward and both gradients against the float64 reference: the casts agree
// bitwise (above and the cast cases), what is left is the f32 accumulation
// over at most 96 terms (1e-5 of the column's largest value) and, in bf16,
// each output's one rounding. 4 experts, one without tokens, groups of 37, 45
// and 22 rows: MX blocks end short, as the reference's zero padding gives.
TEST_P(Float8GroupedReference, ForwardAndGradientsMatch) {
  const GroupedCase& c = GetParam();
  ReferenceCase ref("float8_grouped_" + c.recipe);
  const Float8Cast cast = c.recipe == "mxfp8" ? nn::float8_grouped_recipe("quantize.grouped_mm.mx", "mxfp8")
                                              : nn::float8_grouped_recipe("quantize.grouped_mm.float8", "");
  Tensor x = ref.get("x", c.dtype), w = ref.get("w", c.dtype);
  const Tensor counts = ref.get("counts").to(DType::i64);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  const Tensor y = F::float8_grouped_gemm(x, w, counts, cast);
  autograd::backward({y}, {ref.get("grad_y", c.dtype)});
  // Each column against its own largest value: with power-of-two scales a
  // cast differs from another only where values fall below e4m3's normal
  // range, so a slice cast on the wrong axis shows in the small columns of
  // the output, which a tolerance on the whole output's scale would hide.
  const auto check = [&](const char* what, const Tensor& actual, const Tensor& expected) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(actual.defined());
    EXPECT_EQ(actual.dtype(), c.dtype);
    const int64_t cols = expected.size(-1);
    const std::vector<float> got = actual.to_floats(), want = expected.to(DType::f32).to_floats();
    std::vector<double> column_max(static_cast<size_t>(cols), 0.0);
    for (size_t i = 0; i < want.size(); ++i) {
      double& m = column_max[i % static_cast<size_t>(cols)];
      m = std::max(m, std::fabs(static_cast<double>(want[i])));
    }
    const double relative = c.dtype == DType::f32 ? 1e-5 : 1.0 / 128, floor = c.dtype == DType::f32 ? 1e-5 : 1e-3;
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double tolerance = floor * column_max[i % static_cast<size_t>(cols)] + relative * std::fabs(want[i]);
      if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tolerance) && bad++ < 3) {
        ADD_FAILURE() << "element " << i << ": " << got[i] << " against " << want[i];
      }
    }
    EXPECT_EQ(bad, 0);
  };
  check("y", y, ref.get("y"));
  check("grad_x", x.grad(), ref.get("grad_x"));
  check("grad_w", w.grad(), ref.get("grad_w"));
  // The plain grouped GEMM on the same inputs differs: the operands were quantised.
  const double error = testing::relative_l2_error(F::grouped_gemm(x.detach(), w.detach(), counts), y);
  EXPECT_GT(error, 1e-3);
  EXPECT_LT(error, 0.1);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Float8GroupedReference,
                         ::testing::Values(GroupedCase{"rowwise", DType::f32}, GroupedCase{"rowwise", DType::bf16},
                                           GroupedCase{"mxfp8", DType::f32}, GroupedCase{"mxfp8", DType::bf16}),
                         [](const auto& info) { return info.param.recipe + "_" + dtype_name(info.param.dtype); });

class CudaFloat8Grouped : public ::testing::TestWithParam<DType> {};

// The CUDA kernels against the CPU's: RCEIL block casts and the per-group
// fake quantization bitwise, the grouped GEMM within the reference's tolerance.
TEST_P(CudaFloat8Grouped, CastsAndGroupedGemmMatchTheCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Tensor x = spread_rows(100, 64, 13, dtype);
  const Tensor counts = Tensor::from_vector<int64_t>({37, 0, 45, 18}, {4});
  for (const Float8Cast& cast : grouped_casts()) {
    EXPECT_EQ(testing::on_cpu(ops::float8_fake_quantize_groups(testing::on_cuda(x), testing::on_cuda(counts), cast))
                  .to_floats(),
              ops::float8_fake_quantize_groups(x, counts, cast).to_floats());
  }
  const Float8Cast rceil = nn::float8_grouped_recipe("quantize.grouped_mm.mx", "mxfp8");
  for (const int64_t axis : {0, 1}) {
    const Tensor rows = x.narrow(0, 0, 96).contiguous();
    const ops::Float8Operand cpu = ops::float8_cast(rows, rceil, axis);
    const ops::Float8Operand gpu = ops::float8_cast(testing::on_cuda(rows), rceil, axis);
    EXPECT_EQ(testing::on_cpu(gpu.values).to_floats(), cpu.values.to_floats());
    EXPECT_EQ(testing::on_cpu(gpu.scale).to_ints(), cpu.scale.to_ints());
  }
  const Tensor w = spread_rows(4 * 96, 64, 14, dtype).view({4, 96, 64}), gy = spread_rows(100, 96, 15, dtype);
  for (const Float8Cast& cast : grouped_casts()) {
    Tensor xc = x.detach(), wc = w.detach(), xg = testing::on_cuda(x), wg = testing::on_cuda(w);
    for (Tensor* t : {&xc, &wc, &xg, &wg}) t->set_requires_grad(true);
    const Tensor yc = F::float8_grouped_gemm(xc, wc, counts, cast);
    const Tensor yg = F::float8_grouped_gemm(xg, wg, testing::on_cuda(counts), cast);
    autograd::backward({yc}, {gy});
    autograd::backward({yg}, {testing::on_cuda(gy)});
    const double tol = dtype == DType::f32 ? 1e-5 : 1.0 / 128;
    EXPECT_TRUE(testing::all_close(testing::on_cpu(yg), yc, tol * testing::max_abs(yc), tol));
    EXPECT_TRUE(testing::all_close(testing::on_cpu(xg.grad()), xc.grad(), tol * testing::max_abs(xc.grad()), tol));
    EXPECT_TRUE(testing::all_close(testing::on_cpu(wg.grad()), wc.grad(), tol * testing::max_abs(wc.grad()), tol));
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaFloat8Grouped, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace float8_grouped_test
}  // namespace titan
