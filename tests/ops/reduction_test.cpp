// Reductions against sums computed here in double, their independence from
// the thread count, and broadcast-undoing sums.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "support/reference.h"
#include "titan/core/generator.h"
#include "titan/ops/random.h"
#include "titan/ops/reduction.h"

namespace titan {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator generator(seed);
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.5, 2.0, generator);
  return t.to(dtype);
}

TEST(Reduction, SumMeanMaxSumSquares) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = random_tensor({1000, 37}, 3, dtype);
    double sum = 0, squares = 0, max = -1e30;
    for (float v : x.to_floats()) {
      sum += v;
      squares += static_cast<double>(v) * v;
      max = std::max<double>(max, v);
    }
    // Inputs are exact in either dtype; f32 accumulation of 16 lanes per 4096-element block
    // then double across blocks keeps the relative error near 1e-6 of the sum of magnitudes.
    EXPECT_NEAR(ops::sum(x).item(), sum, 1e-5 * 37000 * 2.5);
    EXPECT_NEAR(ops::mean(x).item(), sum / 37000, 1e-5 * 2.5);
    EXPECT_NEAR(ops::sum_squares(x).item(), squares, 1e-6 * squares);
    EXPECT_EQ(ops::max(x).item(), static_cast<float>(max));
  }
}

TEST(Reduction, ThreadCountDoesNotChangeResult) {
  const Tensor x = random_tensor({1 << 20}, 4);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const float one = static_cast<float>(ops::sum(x).item());
  const float norm_one = static_cast<float>(ops::global_l2_norm(std::vector<Tensor>{x, x}).item());
  omp_set_num_threads(std::max(2, threads));
  const float many = static_cast<float>(ops::sum(x).item());
  const float norm_many = static_cast<float>(ops::global_l2_norm(std::vector<Tensor>{x, x}).item());
  omp_set_num_threads(threads);
  EXPECT_EQ(one, many);
  EXPECT_EQ(norm_one, norm_many);
}

TEST(Reduction, GlobalNorm) {
  const Tensor a = random_tensor({300, 7}, 5), b = random_tensor({11}, 6, DType::bf16);
  double squares = 0;
  for (const Tensor& t : {a, b}) {
    for (float v : t.to_floats()) squares += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(ops::global_l2_norm(std::vector<Tensor>{a, b}).item(), std::sqrt(squares), 1e-6 * std::sqrt(squares));
}

TEST(Reduction, SumToShape) {
  const Tensor x = random_tensor({2, 3, 4}, 7);
  const std::vector<float> v = x.to_floats();
  const Tensor rows = ops::sum_to_shape(x, {3, 1});
  ASSERT_EQ(rows.shape(), (Shape{3, 1}));
  for (int j = 0; j < 3; ++j) {
    double expected = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) expected += v[static_cast<size_t>((i * 3 + j) * 4 + k)];
    EXPECT_NEAR(rows.to_floats()[static_cast<size_t>(j)], expected, 1e-5);
  }
  EXPECT_THROW(ops::sum_to_shape(x, {5}), Error);
}

}  // namespace
}  // namespace titan
