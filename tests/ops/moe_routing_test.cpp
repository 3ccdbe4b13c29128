// Mixture-of-experts routing ops against plain reference computations written
// here (double precision, obvious loops): top-k with its tie rule, the stable
// expert order and its inverse, row permutation and its adjoint, the weighted
// combine and both its gradients; the differentiable wrappers against finite
// differences.
//
// CUDA mixture-of-experts routing ops against the CPU kernels on the same
// inputs, f32 and bf16, including experts with no rows and ties in top-k.
// Exact (bitwise) comparisons: top-k, the expert order, row moves, gather and
// scatter, normalize_rows, sigmoid_backward, combine's row gradients and
// unpermute_sum do the same f32 operations in the same order on both
// backends. Bounded comparisons (support/cuda_compare.h): the CPU's AVX2 and
// AVX-512 kernels fuse `sum += w * x`, its baseline kernels do not; sigmoid
// compares as the elementwise tests compare silu (the two exp implementations
// differ by a few ulp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support/cuda.h"
#include "support/cuda_compare.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"
#include "titan/nn/functional.h"
#include "titan/ops/moe_routing.h"

namespace titan {
namespace moe_routing_test {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(n);
  for (float& v : values) v = normal(random);
  return values;
}

Tensor random_tensor(const Shape& shape, uint32_t seed, DType dtype = DType::f32) {
  return Tensor::from_floats(random_floats(static_cast<size_t>(shape_numel(shape)), seed), shape).to(dtype);
}

// Each row's experts: k distinct ids drawn at random.
Tensor random_routing(int64_t tokens, int64_t experts, int64_t k, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<int64_t> ids;
  std::vector<int64_t> all(static_cast<size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), random);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return Tensor::from_vector(ids, {tokens, k});
}

TEST(MoeRouting, TopKMatchesAStableSortWithLowerIndexFirstOnTies) {
  const int64_t rows = 37, columns = 19, k = 5;
  std::vector<float> scores = random_floats(static_cast<size_t>(rows * columns), 1);
  // Ties, including at the k-th place: rounded values of a few levels.
  for (float& v : scores) v = std::round(v * 2.0f) / 2.0f;
  const ops::TopK got = ops::topk(Tensor::from_floats(scores, {rows, columns}), k);
  const std::vector<float> values = got.values.to_floats();
  const std::vector<int64_t> indices = got.indices.to_ints();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> order(static_cast<size_t>(columns));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return scores[static_cast<size_t>(r * columns + a)] > scores[static_cast<size_t>(r * columns + b)];
    });
    for (int64_t s = 0; s < k; ++s) {
      EXPECT_EQ(indices[static_cast<size_t>(r * k + s)], order[static_cast<size_t>(s)]) << r << "," << s;
      EXPECT_EQ(values[static_cast<size_t>(r * k + s)], scores[static_cast<size_t>(r * columns + order[s])]);
    }
  }
  testing::expect_error([] { ops::topk(Tensor::zeros({2, 3}), 4); }, {"topk", "k = 4", "[1, 3]"});
}

// Group-limited routing against the rule written plainly: each group's two
// largest summed in double, groups stable-sorted by that score, the entries of
// every group past the kept ones zeroed. Rounded scores make tied groups (the
// lower group wins); one row holds a NaN, which ranks its group first.
TEST(MoeRouting, LimitToGroupsKeepsTheBestGroupsAsASortWould) {
  const int64_t rows = 41, groups = 8, per_group = 4, experts = groups * per_group, kept = 3;
  std::vector<float> scores = random_floats(static_cast<size_t>(rows * experts), 11);
  for (float& v : scores) v = std::round(v * 2.0f) / 2.0f;
  scores[5 * experts + 30] = NAN;  // row 5, group 7
  const std::vector<float> got =
      ops::limit_to_groups(Tensor::from_floats(scores, {rows, experts}), groups, kept).to_floats();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores.data() + r * experts;
    std::vector<double> group_score(static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<float> members(row + g * per_group, row + (g + 1) * per_group);
      const bool has_nan = std::any_of(members.begin(), members.end(), [](float v) { return std::isnan(v); });
      std::sort(members.begin(), members.end(), std::greater<float>());
      group_score[static_cast<size_t>(g)] =
          has_nan ? INFINITY : static_cast<double>(members[0]) + static_cast<double>(members[1]);
    }
    std::vector<int64_t> order(static_cast<size_t>(groups));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return group_score[static_cast<size_t>(a)] > group_score[static_cast<size_t>(b)];
    });
    std::vector<bool> keep(static_cast<size_t>(groups), false);
    for (int64_t i = 0; i < kept; ++i) keep[static_cast<size_t>(order[static_cast<size_t>(i)])] = true;
    for (int64_t e = 0; e < experts; ++e) {
      const float want = keep[static_cast<size_t>(e / per_group)] ? row[e] : 0.0f;
      const float have = got[static_cast<size_t>(r * experts + e)];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(have)) << r << "," << e;
      } else {
        EXPECT_EQ(have, want) << r << "," << e;
      }
    }
  }
  testing::expect_error(
      [] {
        ops::limit_to_groups(Tensor::zeros({2, 12}), 8, 2);
      },
      {"limit_to_groups", "12 experts do not fall into 8 groups of at least 2"});
  testing::expect_error(
      [] {
        ops::limit_to_groups(Tensor::zeros({2, 16}), 4, 5);
      },
      {"limit_to_groups", "kept groups 5 must be in [1, 4]"});
}

TEST(MoeRouting, ExpertOrderIsAStableCountingSortAndItsInverse) {
  const int64_t tokens = 50, experts = 7, k = 3;
  const Tensor indices = random_routing(tokens, experts, k, 2);
  const ops::ExpertOrder order = ops::expert_order(indices, experts);
  const std::vector<int64_t> chosen = indices.to_ints(), ordered = order.order.to_ints(),
                             inverse = order.inverse.to_ints(), counts = order.counts.to_ints();
  std::vector<int64_t> expected(static_cast<size_t>(tokens * k));
  std::iota(expected.begin(), expected.end(), 0);
  std::stable_sort(expected.begin(), expected.end(), [&](int64_t a, int64_t b) {
    return chosen[static_cast<size_t>(a)] < chosen[static_cast<size_t>(b)];
  });
  EXPECT_EQ(ordered, expected);
  for (int64_t p = 0; p < tokens * k; ++p) EXPECT_EQ(inverse[static_cast<size_t>(ordered[p])], p);
  for (int64_t e = 0; e < experts; ++e) {
    EXPECT_EQ(counts[static_cast<size_t>(e)], std::count(chosen.begin(), chosen.end(), e)) << e;
  }
  // An expert with no token and every token on one expert are ordinary cases.
  const ops::ExpertOrder one = ops::expert_order(Tensor::from_vector(std::vector<int64_t>(8, 2), {8, 1}), 4);
  EXPECT_EQ(one.counts.to_ints(), (std::vector<int64_t>{0, 0, 8, 0}));
  testing::expect_error(
      [] {
        ops::expert_order(Tensor::from_vector(std::vector<int64_t>{0, 5}, {1, 2}), 4);
      },
      {"expert_order", "expert 5", "[0, 4)"});
}

TEST(MoeRouting, PermuteAndUnpermuteAreAdjointAndMatchPlainLoops) {
  const int64_t tokens = 23, experts = 5, k = 2, dim = 9;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random_tensor({tokens, dim}, 3, dtype);
    const ops::ExpertOrder order = ops::expert_order(random_routing(tokens, experts, k, 4), experts);
    const Tensor rows = ops::permute_tokens(x, order.order, k);
    const std::vector<float> xv = x.to_floats(), rv = rows.to_floats();
    const std::vector<int64_t> ordered = order.order.to_ints();
    for (int64_t p = 0; p < tokens * k; ++p) {
      for (int64_t d = 0; d < dim; ++d) {
        EXPECT_EQ(rv[static_cast<size_t>(p * dim + d)], xv[static_cast<size_t>(ordered[p] / k * dim + d)]);
      }
    }
    const Tensor g = random_tensor({tokens * k, dim}, 5, dtype);
    const std::vector<float> back = ops::unpermute_sum(g, order.inverse, k).to_floats(), gv = g.to_floats();
    const std::vector<int64_t> inverse = order.inverse.to_ints();
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t d = 0; d < dim; ++d) {
        double sum = 0.0;
        for (int64_t s = 0; s < k; ++s) sum += gv[static_cast<size_t>(inverse[t * k + s] * dim + d)];
        const std::vector<float> exact{static_cast<float>(sum)};
        const float want =
            Tensor::from_floats(exact, {1}).to(dtype).to_floats()[0];  // rounded once, as the kernel does
        EXPECT_NEAR(back[static_cast<size_t>(t * dim + d)], want, dtype == DType::bf16 ? 1e-2 : 1e-5);
      }
    }
  }
}

TEST(MoeRouting, CombineAndItsGradientsMatchPlainLoops) {
  const int64_t tokens = 17, experts = 6, k = 3, dim = 11;
  const ops::ExpertOrder order = ops::expert_order(random_routing(tokens, experts, k, 6), experts);
  const Tensor rows = random_tensor({tokens * k, dim}, 7), weights = random_tensor({tokens, k}, 8);
  const Tensor grad_out = random_tensor({tokens, dim}, 9);
  const std::vector<float> rv = rows.to_floats(), wv = weights.to_floats(), gv = grad_out.to_floats();
  const std::vector<int64_t> inverse = order.inverse.to_ints();
  const std::vector<float> out = ops::combine_experts(rows, order.inverse, weights).to_floats();
  const ops::CombineGrads grads = ops::combine_experts_backward(grad_out, rows, order.inverse, weights);
  const std::vector<float> grad_rows = grads.grad_rows.to_floats(), grad_weights = grads.grad_weights.to_floats();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      double sum = 0.0;
      for (int64_t s = 0; s < k; ++s) {
        sum += double{wv[static_cast<size_t>(t * k + s)]} * rv[static_cast<size_t>(inverse[t * k + s] * dim + d)];
      }
      EXPECT_NEAR(out[static_cast<size_t>(t * dim + d)], sum, 1e-5 * (1 + std::abs(sum)));
    }
    for (int64_t s = 0; s < k; ++s) {
      const int64_t at = inverse[static_cast<size_t>(t * k + s)];
      double dot = 0.0;
      for (int64_t d = 0; d < dim; ++d) {
        dot += double{gv[static_cast<size_t>(t * dim + d)]} * rv[static_cast<size_t>(at * dim + d)];
        EXPECT_FLOAT_EQ(grad_rows[static_cast<size_t>(at * dim + d)],
                        wv[static_cast<size_t>(t * k + s)] * gv[static_cast<size_t>(t * dim + d)]);
      }
      EXPECT_NEAR(grad_weights[static_cast<size_t>(t * k + s)], dot, 1e-5 * (1 + std::abs(dot)));
    }
  }
}

TEST(MoeRouting, DifferentiableRoutingPassesFiniteDifferences) {
  const int64_t tokens = 6, experts = 5, k = 2, dim = 4;
  const Tensor indices = random_routing(tokens, experts, k, 10);
  const ops::ExpertOrder order = ops::expert_order(indices, experts);
  // Scores -> top-k weights, renormalised; tokens -> expert rows -> combined.
  EXPECT_TRUE(testing::check_gradients(
      [&](const std::vector<Tensor>& in) {
        const Tensor probs = F::softmax(in[0]);
        return F::normalize_rows(F::gather_columns(probs, indices));
      },
      {testing::random_leaf({tokens, experts}, 11)}));
  EXPECT_TRUE(testing::check_gradients(
      [&](const std::vector<Tensor>& in) {
        const Tensor rows = F::permute_tokens(in[0], order.order, order.inverse, k);
        return F::combine_experts(F::mul(rows, rows), order.inverse, in[1]);
      },
      {testing::random_leaf({tokens, dim}, 12), testing::random_leaf({tokens, k}, 13)}));
  EXPECT_TRUE(testing::check_gradients([](const std::vector<Tensor>& in) { return F::sigmoid(in[0]); },
                                       {testing::random_leaf({3, 7}, 14, 2.0)}));
}

}  // namespace moe_routing_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace moe_routing_test {

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

// DeepSeek-V3's shape (256 experts in 8 groups, 4 kept) and a small one with
// tied groups: the same selection, bitwise (the same f32 sums and compares).
TEST(CudaMoeRouting, LimitToGroupsMatchesCpuBitwise) {
  TITAN_REQUIRE_CUDA();
  for (const auto& [rows, experts, groups, kept, step] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, double>>{{300, 256, 8, 4, 0.0},
                                                                           {37, 32, 8, 3, 0.5}}) {
    std::vector<float> scores = random_cpu({rows, experts}, DType::f32, 21, -2.0, 2.0).to_floats();
    if (step > 0) {
      for (float& v : scores) v = static_cast<float>(std::round(v / step) * step);
    }
    const Tensor cpu_scores = from_floats(scores, {rows, experts});
    EXPECT_TRUE(same_bits(ops::limit_to_groups(on_cuda(cpu_scores), groups, kept),
                          ops::limit_to_groups(cpu_scores, groups, kept)));
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

}  // namespace moe_routing_test
}  // namespace titan::testing
