// Finite-difference checks of every differentiable function's backward, in
// f32 (see tests/support/gradcheck.h for the tolerance argument).
#include <gtest/gtest.h>

#include "support/gradcheck.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"

namespace titan {
namespace gradcheck_test {

using testing::check_gradients;
using testing::random_leaf;

// The harness itself must be able to fail: a function whose recorded backward
// is off by 10% is rejected.
TEST(Gradcheck, DetectsAWrongBackward) {
  auto wrong_square = [](const std::vector<Tensor>& x) {
    Tensor y = ops::mul(x[0], x[0]);
    const Tensor saved = x[0].detach();
    autograd::record("WrongSquareBackward", {&x[0]}, {&y},
                     [saved](const auto& g) { return std::vector<Tensor>{ops::scale(ops::mul(g[0], saved), 2.2f)}; });
    return y;
  };
  EXPECT_FALSE(check_gradients(wrong_square, {random_leaf({10}, 1)}));
}

TEST(Gradcheck, LinearAndMatmul) {
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::linear(x[0], x[1]); },
                              {random_leaf({2, 5, 7}, 1), random_leaf({4, 7}, 2)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::linear(x[0], x[1], x[2]); },
                              {random_leaf({2, 5, 7}, 13), random_leaf({4, 7}, 14), random_leaf({4}, 15)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::matmul(x[0], x[1]); },
                              {random_leaf({5, 7}, 3), random_leaf({7, 3}, 4)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::matmul(x[0], x[1]); },
                              {random_leaf({2, 5, 7}, 5), random_leaf({2, 7, 3}, 6)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::matmul(x[0], x[1]); },
                              {random_leaf({2, 5, 7}, 7), random_leaf({7, 3}, 8)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::matmul(x[0], x[1]); },
                              {random_leaf({5, 7}, 9), random_leaf({3, 7, 4}, 10)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::matmul(x[0], F::transpose(x[1], 0, 1)); },
                              {random_leaf({5, 7}, 11), random_leaf({4, 7}, 12)}));
}

TEST(Gradcheck, NormsAndActivations) {
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::rms_norm(x[0], x[1], 1e-5f); },
                              {random_leaf({3, 4, 16}, 1), random_leaf({16}, 2)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::silu(x[0]); }, {random_leaf({40}, 3, 2.0)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::swiglu(x[0], x[1]); },
                              {random_leaf({6, 9}, 4, 2.0), random_leaf({6, 9}, 5)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::geglu(x[0], x[1]); },
                              {random_leaf({6, 9}, 7, 2.0), random_leaf({6, 9}, 8)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::softmax(x[0]); }, {random_leaf({5, 11}, 6, 2.0)}));
}

TEST(Gradcheck, ShapesAndReductions) {
  EXPECT_TRUE(check_gradients(
      [](const auto& x) {
        return F::permute(F::reshape(x[0], {3, 2, 4}), {2, 0, 1});
      },
      {random_leaf({6, 4}, 1)}));
  EXPECT_TRUE(check_gradients(
      [](const auto& x) {
        return F::contiguous(F::expand(x[0], {3, 4, 5}));
      },
      {random_leaf({4, 1}, 2)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::narrow(x[0], 1, 2, 3); }, {random_leaf({3, 6}, 3)}));
  EXPECT_TRUE(check_gradients([](const auto& x) { return F::sub(F::mean(x[0]), F::sum(x[1])); },
                              {random_leaf({7}, 4), random_leaf({1}, 5)}));
}

TEST(Gradcheck, EmbeddingAndRope) {
  const Tensor ids = Tensor::from_vector<int64_t>({3, 1, 3, 0, 4, 3}, {2, 3});
  EXPECT_TRUE(check_gradients([&](const auto& x) { return F::embedding(x[0], ids); }, {random_leaf({5, 4}, 1)}));
  const ops::RopeTable table = ops::rope_table(8, 64, 10000.0, {});
  const Tensor positions = Tensor::from_vector<int64_t>({0, 1, 2, 7, 40, 63}, {2, 3});
  for (ops::RopeStyle style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
    EXPECT_TRUE(check_gradients([&](const auto& x) { return F::rope(x[0], table, positions, style); },
                                {random_leaf({2, 3, 2, 8}, 2)}));
  }
  // Partial rotary (the first 6 of 10 features) with YaRN's attention factor in the table.
  const ops::RopeTable partial =
      ops::rope_table(6, 64, 10000.0, {.type = ops::RopeScalingType::yarn, .factor = 4.0, .original_max_position = 16});
  for (ops::RopeStyle style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
    EXPECT_TRUE(check_gradients([&](const auto& x) { return F::rope(x[0], partial, positions, style); },
                                {random_leaf({2, 3, 2, 10}, 3)}));
  }
}

TEST(Gradcheck, NaiveAttentionAllMasks) {
  const Tensor docs = Tensor::from_vector<int64_t>({0, 0, 0, 1, 1, 2, 2, 2, 0, 1, 1, 1, 1, 1, 2, 2}, {2, 8});
  std::vector<ops::AttentionMask> masks{{true, 0, {}}, {false, 0, {}}, {true, 3, {}}, {true, 0, docs}};
  for (const auto& mask : masks) {
    EXPECT_TRUE(check_gradients(
        [&](const auto& x) {
          return F::scaled_dot_product_attention(x[0], x[1], x[2], mask, 0.5f, F::AttentionImpl::naive);
        },
        {random_leaf({2, 8, 4, 4}, 1), random_leaf({2, 8, 2, 4}, 2), random_leaf({2, 8, 2, 4}, 3)}));
  }
}

TEST(Gradcheck, CrossEntropyWithCapAndZLoss) {
  const Tensor targets = Tensor::from_vector<int64_t>({1, -100, 4, 0, 2}, {5});
  for (float softcap : {0.0f, 3.0f}) {
    for (float z_loss : {0.0f, 0.1f}) {
      ops::CrossEntropyOptions options{.softcap = softcap, .z_loss = z_loss};
      EXPECT_TRUE(check_gradients([&](const auto& x) { return F::cross_entropy(x[0], targets, options); },
                                  {random_leaf({5, 6}, 1, 2.0)}))
          << "softcap " << softcap << " z_loss " << z_loss;
    }
  }
}

}  // namespace gradcheck_test
}  // namespace titan
