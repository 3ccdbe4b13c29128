// Mixture-of-experts routing ops against plain reference computations written
// here (double precision, obvious loops): top-k with its tie rule, the stable
// expert order and its inverse, row permutation and its adjoint, the weighted
// combine and both its gradients; the differentiable wrappers against finite
// differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "support/expect_error.h"
#include "support/gradcheck.h"
#include "titan/nn/functional.h"
#include "titan/ops/moe_routing.h"

namespace titan {
namespace {

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

}  // namespace
}  // namespace titan
