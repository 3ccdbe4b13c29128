// CUDA mixture-of-experts ops (routing and the grouped GEMM) against the CPU
// kernels on the same inputs, f32 and bf16, including experts with no rows,
// every row on one expert, and ties in top-k; and the whole routing recorded
// into a CUDA graph, replayed on new scores, against eager runs.
//
// Exact (bitwise) comparisons: top-k, the expert order, row moves, gather and
// scatter, normalize_rows, sigmoid_backward, combine's row gradients and
// unpermute_sum do the same f32 operations in the same order on both
// backends; the grouped GEMM on integer-valued operands, whose sums are exact
// in any order.
//
// Bounded comparisons, each derived from u = 2^-24 (f32 unit roundoff): a sum
// of n rounded products is within n*u*S of exact, S = sum of |products|, on
// either backend whatever its order or its use of FMA (the CPU's AVX2 and
// AVX-512 kernels fuse `sum += w * x`, its baseline kernels do not), so the
// backends differ by at most 2*n*u*S. Any wrong term is orders of magnitude
// bigger. A bf16 result adds one bf16 ulp (at most 2^-7 of its magnitude)
// when the two f32 values straddle a rounding boundary. sigmoid compares as
// the elementwise tests compare silu (the two exp implementations differ by
// a few ulp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "titan/core/step_recorder.h"
#include "titan/core/copy.h"
#include "titan/ops/grouped_gemm.h"
#include "titan/ops/moe_routing.h"

namespace titan::testing {
namespace {

constexpr double kUnit = 0x1p-24;     // f32 unit roundoff
constexpr double kBf16Step = 0x1p-7;  // one bf16 ulp, relative to the magnitude

// Identical dtype, shape and bits (a CUDA result against the CPU's).
::testing::AssertionResult same_bits(const Tensor& cuda_result, const Tensor& cpu_result) {
  if (!cuda_result.device().is_cuda()) return ::testing::AssertionFailure() << "the result is not on the GPU";
  const Tensor actual = on_cpu(cuda_result).contiguous(), expected = cpu_result.contiguous();
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << dtype_name(actual.dtype()) << " " << shape_str(actual.shape()) << " vs "
                                         << dtype_name(expected.dtype()) << " " << shape_str(expected.shape());
  }
  if (actual.numel() == 0) return ::testing::AssertionSuccess();
  const size_t size = actual.element_size();
  const auto* a = static_cast<const unsigned char*>(actual.data_ptr());
  const auto* e = static_cast<const unsigned char*>(expected.data_ptr());
  int64_t differing = 0, first = -1;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (std::memcmp(a + static_cast<size_t>(i) * size, e + static_cast<size_t>(i) * size, size) != 0) {
      if (first < 0) first = i;
      ++differing;
    }
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  const bool ints = actual.dtype() == DType::i64 || actual.dtype() == DType::i32;
  const auto at = static_cast<size_t>(first);
  auto failure = ::testing::AssertionFailure();
  failure << differing << " of " << actual.numel() << " elements differ; first at flat index " << first << ": ";
  if (ints) return failure << actual.to_ints()[at] << " vs " << expected.to_ints()[at];
  return failure << actual.to_floats()[at] << " vs " << expected.to_floats()[at];
}

// |actual - expected| <= bound elementwise (NaN fails).
::testing::AssertionResult within(const Tensor& cuda_result, const Tensor& cpu_result,
                                  const std::vector<double>& bound) {
  if (!cuda_result.device().is_cuda()) return ::testing::AssertionFailure() << "the result is not on the GPU";
  if (cuda_result.dtype() != cpu_result.dtype() || cuda_result.shape() != cpu_result.shape()) {
    return ::testing::AssertionFailure() << "dtype or shape differs";
  }
  const std::vector<float> a = on_cpu(cuda_result).to_floats(), e = cpu_result.to_floats();
  int64_t failures = 0;
  size_t worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double error = std::fabs(static_cast<double>(a[i]) - e[i]);
    if (!(error <= bound[i])) ++failures;
    const double ratio = std::isnan(error) ? 1e300 : error / std::max(bound[i], 1e-300);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << a.size() << " elements exceed their bound; worst at "
                                       << worst << ": " << a[worst] << " vs " << e[worst] << " (bound " << bound[worst]
                                       << ")";
}

// The bound of a bf16 result: the f32 bound plus one bf16 step of the value.
void add_bf16_step(std::vector<double>& bound, const Tensor& expected) {
  if (expected.dtype() != DType::bf16) return;
  const std::vector<float> e = expected.to_floats();
  for (size_t i = 0; i < bound.size(); ++i) bound[i] += kBf16Step * std::fabs(e[i]);
}

// Each token's k experts, distinct, drawn from the first `used` of them (the rest get no rows).
Tensor random_routing(int64_t tokens, int64_t used, int64_t k, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<int64_t> all(static_cast<size_t>(used)), ids;
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), random);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return Tensor::from_vector(ids, {tokens, k});
}

Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32) {
  return Tensor::from_floats(values, shape).to(dtype);
}

// ---- top-k ------------------------------------------------------------------

struct TopKCase {
  int64_t rows, columns, k;
  double step;  // scores rounded to multiples of step (0: left alone) to make ties
};

TEST(CudaMoeRouting, TopKMatchesCpuBitwiseIncludingTies) {
  TITAN_REQUIRE_CUDA();
  for (const TopKCase& c : {TopKCase{37, 19, 5, 0.5}, TopKCase{4096, 64, 6, 0.0}, TopKCase{3, 300, 300, 0.25},
                            TopKCase{50, 128, 1, 0.0}, TopKCase{200, 160, 40, 0.125}, TopKCase{9, 7, 7, 1.0}}) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.columns) + " k=" + std::to_string(c.k));
    std::vector<float> scores = random_cpu({c.rows, c.columns}, DType::f32, 20, -2.0, 2.0).to_floats();
    if (c.step > 0) {
      for (float& v : scores) v = static_cast<float>(std::round(v / c.step) * c.step);
    }
    const Tensor cpu_scores = from_floats(scores, {c.rows, c.columns});
    const ops::TopK expected = ops::topk(cpu_scores, c.k);
    const ops::TopK actual = ops::topk(on_cuda(cpu_scores), c.k);
    EXPECT_TRUE(same_bits(actual.indices, expected.indices));
    EXPECT_TRUE(same_bits(actual.values, expected.values));
  }
}

// Whole rows of one value, -0 against +0 (equal for the CPU's >), and infinities.
TEST(CudaMoeRouting, TopKKeepsTheLowerIndexFirstOnEqualScores) {
  TITAN_REQUIRE_CUDA();
  const float inf = INFINITY;
  const std::vector<float> scores{0.5f,  0.5f, 0.5f,  0.5f, 0.5f,  0.5f,  //
                                  -0.0f, 0.0f, -0.0f, 0.0f, -1.0f, 1.0f,  //
                                  -inf,  3.0f, inf,   -inf, inf,   3.0f};
  const Tensor cpu_scores = from_floats(scores, {3, 6});
  const ops::TopK expected = ops::topk(cpu_scores, 4);
  EXPECT_EQ(expected.indices.to_ints(), (std::vector<int64_t>{0, 1, 2, 3, 5, 0, 1, 2, 2, 4, 1, 5}));
  const ops::TopK actual = ops::topk(on_cuda(cpu_scores), 4);
  EXPECT_TRUE(same_bits(actual.indices, expected.indices));
  EXPECT_TRUE(same_bits(actual.values, expected.values));
}

// ---- expert order -----------------------------------------------------------

struct OrderCase {
  int64_t tokens, experts, used, k;
  const char* what;
};

TEST(CudaMoeRouting, ExpertOrderMatchesCpuBitwise) {
  TITAN_REQUIRE_CUDA();
  for (const OrderCase& c :
       {OrderCase{1000, 16, 16, 4, "every expert used"}, OrderCase{1000, 64, 8, 4, "56 experts with no rows"},
        OrderCase{513, 8, 1, 1, "every row on expert 0"}, OrderCase{7, 1, 1, 1, "one expert"},
        OrderCase{20000, 256, 256, 8, "160000 pairs"}, OrderCase{0, 4, 4, 2, "no tokens: zero counts"}}) {
    SCOPED_TRACE(c.what);
    const Tensor indices = random_routing(c.tokens, c.used, c.k, 21);
    const ops::ExpertOrder expected = ops::expert_order(indices, c.experts);
    const Tensor device_indices = on_cuda(indices);
    const ops::ExpertOrder actual = ops::expert_order(device_indices, c.experts);
    EXPECT_TRUE(same_bits(actual.order, expected.order));
    EXPECT_TRUE(same_bits(actual.inverse, expected.inverse));
    EXPECT_TRUE(same_bits(actual.counts, expected.counts));
    // Deterministic: a second run gives the same bits.
    EXPECT_TRUE(same_bits(ops::expert_order(device_indices, c.experts).order, expected.order));
  }
  // Every row on one expert that is not the first.
  const Tensor one = Tensor::from_vector(std::vector<int64_t>(300, 5), {100, 3});
  const ops::ExpertOrder expected = ops::expert_order(one, 8);
  const ops::ExpertOrder actual = ops::expert_order(on_cuda(one), 8);
  EXPECT_TRUE(same_bits(actual.order, expected.order));
  EXPECT_TRUE(same_bits(actual.counts, expected.counts));
}

// ---- moving rows and combining them -----------------------------------------

TEST(CudaMoeRouting, PermuteAndUnpermuteSumMatchCpuBitwise) {
  TITAN_REQUIRE_CUDA();
  const int64_t tokens = 300, experts = 8;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{4}}) {
      // 1 and 7 columns exercise the narrow copy widths, 1000 the block-stride loop.
      for (int64_t dim : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " k=" + std::to_string(k) + " dim=" + std::to_string(dim));
        const ops::ExpertOrder order = ops::expert_order(random_routing(tokens, experts, k, 22), experts);
        const Tensor x = random_cpu({tokens, dim}, dtype, 23);
        EXPECT_TRUE(same_bits(ops::permute_tokens(on_cuda(x), on_cuda(order.order), k),
                              ops::permute_tokens(x, order.order, k)));
        const Tensor grad_rows = random_cpu({tokens * k, dim}, dtype, 24);
        EXPECT_TRUE(same_bits(ops::unpermute_sum(on_cuda(grad_rows), on_cuda(order.inverse), k),
                              ops::unpermute_sum(grad_rows, order.inverse, k)));
      }
    }
  }
}

TEST(CudaMoeRouting, CombineAndItsGradientsMatchCpu) {
  TITAN_REQUIRE_CUDA();
  const int64_t tokens = 200, experts = 8;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t k : {int64_t{1}, int64_t{4}}) {
      for (int64_t dim : {int64_t{1}, int64_t{96}, int64_t{1000}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " k=" + std::to_string(k) + " dim=" + std::to_string(dim));
        const ops::ExpertOrder order = ops::expert_order(random_routing(tokens, experts, k, 25), experts);
        const Tensor rows = random_cpu({tokens * k, dim}, dtype, 26);
        const Tensor weights = random_cpu({tokens, k}, DType::f32, 27, 0.0, 1.0);
        const Tensor grad_out = random_cpu({tokens, dim}, dtype, 28);
        const Tensor inverse = order.inverse;

        const Tensor expected = ops::combine_experts(rows, inverse, weights);
        const Tensor actual = ops::combine_experts(on_cuda(rows), on_cuda(inverse), on_cuda(weights));
        const ops::CombineGrads expected_grads = ops::combine_experts_backward(grad_out, rows, inverse, weights);
        const ops::CombineGrads actual_grads =
            ops::combine_experts_backward(on_cuda(grad_out), on_cuda(rows), on_cuda(inverse), on_cuda(weights));

        const std::vector<float> r = rows.to_floats(), w = weights.to_floats(), g = grad_out.to_floats();
        const std::vector<int64_t> at = inverse.to_ints();
        // out[t, d]: k products; grad_weights[t, s]: dim products.
        std::vector<double> out_bound(static_cast<size_t>(tokens * dim)), weight_bound(static_cast<size_t>(tokens * k));
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t s = 0; s < k; ++s) {
            const auto pair = static_cast<size_t>(t * k + s);
            double dot_scale = 0.0;
            for (int64_t d = 0; d < dim; ++d) {
              const double row = r[static_cast<size_t>(at[pair] * dim + d)];
              out_bound[static_cast<size_t>(t * dim + d)] += std::fabs(w[pair] * row);
              dot_scale += std::fabs(g[static_cast<size_t>(t * dim + d)] * row);
            }
            weight_bound[pair] = 2.01 * static_cast<double>(dim) * kUnit * dot_scale;
          }
        }
        for (double& b : out_bound) b *= 2.01 * static_cast<double>(k) * kUnit;
        add_bf16_step(out_bound, expected);
        EXPECT_TRUE(within(actual, expected, out_bound)) << "combine";
        EXPECT_TRUE(same_bits(actual_grads.grad_rows, expected_grads.grad_rows)) << "grad_rows";
        EXPECT_TRUE(within(actual_grads.grad_weights, expected_grads.grad_weights, weight_bound)) << "grad_weights";
      }
    }
  }
}

// ---- router weights ---------------------------------------------------------

TEST(CudaMoeRouting, GatherAndScatterColumnsMatchCpuBitwise) {
  TITAN_REQUIRE_CUDA();
  const int64_t rows = 300, columns = 64, k = 6;
  const Tensor x = random_cpu({rows, columns}, DType::f32, 29);
  const Tensor indices = random_routing(rows, columns, k, 30);
  EXPECT_TRUE(same_bits(ops::gather_columns(on_cuda(x), on_cuda(indices)), ops::gather_columns(x, indices)));
  const Tensor grad = random_cpu({rows, k}, DType::f32, 31);
  EXPECT_TRUE(same_bits(ops::scatter_columns(on_cuda(grad), on_cuda(indices), columns),
                        ops::scatter_columns(grad, indices, columns)));
  // A column chosen twice in a row gets both gradients, added in slot order.
  const Tensor repeated = Tensor::from_vector(std::vector<int64_t>{1, 1, 3, 0, 2, 2}, {2, 3});
  const Tensor small_grad = random_cpu({2, 3}, DType::f32, 32);
  EXPECT_TRUE(same_bits(ops::scatter_columns(on_cuda(small_grad), on_cuda(repeated), 4),
                        ops::scatter_columns(small_grad, repeated, 4)));
}

TEST(CudaMoeRouting, NormalizeRowsMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const int64_t rows = 500, columns = 8;
  std::vector<float> x = random_cpu({rows, columns}, DType::f32, 33, 0.0, 1.0).to_floats();
  // A row of zeros and a row summing to exactly zero: both stay zero, forward and backward.
  for (int64_t c = 0; c < columns; ++c) {
    x[static_cast<size_t>(c)] = 0.0f;
    x[static_cast<size_t>(columns + c)] = c % 2 == 0 ? 0.5f : -0.5f;
  }
  const Tensor cpu_x = from_floats(x, {rows, columns});
  const Tensor grad = random_cpu({rows, columns}, DType::f32, 34);
  // Forward: the same column-order sum and one division per element.
  EXPECT_TRUE(same_bits(ops::normalize_rows(on_cuda(cpu_x)), ops::normalize_rows(cpu_x)));

  // Backward: dx = (g - sum_j g_j q_j) / s with q = x / s. The dot product of
  // `columns` products differs by at most 2 * columns * u * W (W = sum |g_j q_j|);
  // the subtraction, the division and the final rounding add a rounding each.
  const Tensor expected = ops::normalize_rows_backward(grad, cpu_x);
  const std::vector<float> g = grad.to_floats(), e = expected.to_floats();
  std::vector<double> bound(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0, weighted_scale = 0.0;
    for (int64_t c = 0; c < columns; ++c) sum += x[static_cast<size_t>(r * columns + c)];
    if (sum == 0.0) continue;  // exact zeros
    for (int64_t c = 0; c < columns; ++c) {
      const auto i = static_cast<size_t>(r * columns + c);
      weighted_scale += std::fabs(g[i] * x[i] / sum);
    }
    for (int64_t c = 0; c < columns; ++c) {
      const auto i = static_cast<size_t>(r * columns + c);
      bound[i] = 2.02 * kUnit * (static_cast<double>(columns) * weighted_scale + std::fabs(g[i]) + weighted_scale) /
                     std::fabs(sum) +
                 2.02 * kUnit * std::fabs(e[i]);
    }
  }
  EXPECT_TRUE(within(ops::normalize_rows_backward(on_cuda(grad), on_cuda(cpu_x)), expected, bound));
}

TEST(CudaMoeRouting, SigmoidMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Shape& shape : {Shape{1}, Shape{257, 33}, Shape{(1 << 16) + 5}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      // [-12, 12] reaches both saturated ends.
      const Tensor x = random_cpu(shape, dtype, 35, -12.0, 12.0), grad = random_cpu(shape, dtype, 36);
      const Tensor expected = ops::sigmoid(x);
      const Tensor actual = ops::sigmoid(on_cuda(x));
      // As the elementwise tests' silu: f32 ~16 ulp, bf16 one bf16 ulp.
      if (dtype == DType::bf16) {
        EXPECT_TRUE(all_close(on_cpu(actual), expected, 1e-6, 1.0 / 128));
      } else {
        EXPECT_TRUE(all_close(on_cpu(actual), expected, 2e-7, 2e-6));
      }
      // The backward from the same y: (g * y) * (1 - y), rounded alike.
      EXPECT_TRUE(
          same_bits(ops::sigmoid_backward(on_cuda(grad), on_cuda(expected)), ops::sigmoid_backward(grad, expected)));
    }
  }
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

// ---- the whole routing in a CUDA graph --------------------------------------

struct MoeOutputs {
  Tensor order, counts, out, grad_x, grad_w;
};

// Router scores -> top-k -> expert order -> rows -> expert GEMM -> combine,
// and the two GEMM gradients: the device work of one MoE layer's routing.
MoeOutputs route(const Tensor& scores, const Tensor& x, const Tensor& w, int64_t k) {
  const ops::TopK top = ops::topk(scores, k);
  const Tensor weights = ops::normalize_rows(top.values);
  const ops::ExpertOrder order = ops::expert_order(top.indices, scores.size(1));
  const Tensor rows = ops::permute_tokens(x, order.order, k);
  const Tensor expert_rows = ops::grouped_gemm(rows, w, order.counts);
  const Tensor out = ops::combine_experts(expert_rows, order.inverse, weights);
  const ops::CombineGrads grads = ops::combine_experts_backward(out, expert_rows, order.inverse, weights);
  const Tensor grad_rows = ops::grouped_gemm_input_grad(grads.grad_rows, w, order.counts);
  return {order.order, order.counts, out, ops::unpermute_sum(grad_rows, order.inverse, k),
          ops::grouped_gemm_weight_grad(grads.grad_rows, rows, order.counts)};
}

// Nothing in the routing reads the device from the host: it records into a
// graph under NoHostReadsScope, and replays on new scores (new counts) give
// the eager run's bits.
TEST(CudaMoe, RoutingRecordsIntoAGraphAndReplaysLikeEager) {
  TITAN_REQUIRE_CUDA();
  const int64_t tokens = 300, experts = 16, k = 4, dim = 48, hidden = 80;
  const Tensor x = on_cuda(random_cpu({tokens, dim}, DType::f32, 50));
  const Tensor w = on_cuda(random_cpu({experts, hidden, dim}, DType::f32, 51));
  // Positive scores: normalize_rows's sums stay away from zero.
  const Tensor scores = on_cuda(random_cpu({tokens, experts}, DType::f32, 52, 0.01, 1.0));
  MoeOutputs recorded;
  std::unique_ptr<StepRecorder> recorder = make_step_recorder(DeviceType::cuda);
  recorder->begin();
  {
    NoHostReadsScope no_reads("the recorded MoE routing");
    recorded = route(scores, x, w, k);
  }
  recorder->end();
  for (uint32_t seed : {53u, 54u}) {
    SCOPED_TRACE("scores seed " + std::to_string(seed));
    // The second set sends almost every token to experts 0..3, leaving the rest empty.
    Tensor next = random_cpu({tokens, experts}, DType::f32, seed, 0.01, 1.0);
    if (seed == 54u) {
      std::vector<float> v = next.to_floats();
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t e = 0; e < 4; ++e) v[static_cast<size_t>(t * experts + e)] += 2.0f;
      }
      next = from_floats(v, {tokens, experts});
    }
    titan::copy_(scores, on_cuda(next));
    recorder->replay();
    const MoeOutputs eager = route(scores, x, w, k);
    EXPECT_TRUE(same_bits(recorded.order, on_cpu(eager.order)));
    EXPECT_TRUE(same_bits(recorded.counts, on_cpu(eager.counts)));
    EXPECT_TRUE(same_bits(recorded.out, on_cpu(eager.out)));
    EXPECT_TRUE(same_bits(recorded.grad_x, on_cpu(eager.grad_x)));
    EXPECT_TRUE(same_bits(recorded.grad_w, on_cpu(eager.grad_w)));
    // And the counts are the CPU's for these scores.
    EXPECT_TRUE(same_bits(recorded.counts, ops::expert_order(ops::topk(next, k).indices, experts).counts));
  }
}

}  // namespace
}  // namespace titan::testing
