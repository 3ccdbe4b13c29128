// Reductions against sums computed here in double, their independence from
// the thread count, and broadcast-undoing sums.
//
// CUDA reductions against the CPU backend on the same inputs: sum, mean, max,
// sum of squares, the multi-tensor global norm and sum_to_shape, in f32 and
// bf16, at sizes that are not multiples of the 4096-element tile or the block.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/core/generator.h"
#include "titan/ops/random.h"
#include "titan/ops/reduction.h"

namespace titan {
namespace reduction_test {

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

}  // namespace reduction_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace reduction_test {

double sum_of_magnitudes(const Tensor& x) {
  double total = 0.0;
  for (float v : x.to_floats()) total += std::fabs(v);
  return total;
}

// Both backends reduce 4096-element tiles in f32 and combine tiles in double;
// only the order inside a tile differs (16 lanes on the CPU, a 256-thread tree
// here). Each f32 partial carries at most ~24 roundings of 2^-24 relative to
// its sum of magnitudes, so 1e-6 of the total magnitude bounds the difference
// while a dropped or doubled element (>= 1e-5 of it at these sizes) fails.
TEST(CudaReduction, MatchesCpu) {
  TITAN_REQUIRE_CUDA();
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{4097}, int64_t{37003}, int64_t{(1 << 20) + 5}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", n = " + std::to_string(n));
      const Tensor x = random_cpu({n}, dtype, 11 + static_cast<uint64_t>(n), -2.0, 3.0);
      const Tensor gx = on_cuda(x);
      const double magnitude = sum_of_magnitudes(x);
      const Tensor sum = ops::sum(gx);
      EXPECT_EQ(sum.device(), Device::cuda());
      EXPECT_EQ(sum.dim(), 0);
      EXPECT_NEAR(sum.item(), ops::sum(x).item(), 1e-6 * magnitude);
      EXPECT_NEAR(ops::mean(gx).item(), ops::mean(x).item(), 1e-6 * magnitude / static_cast<double>(n));
      const double squares = ops::sum_squares(x).item();
      EXPECT_NEAR(ops::sum_squares(gx).item(), squares, 1e-6 * squares);
      EXPECT_EQ(ops::max(gx).item(), ops::max(x).item());  // exact: no rounding in a max
    }
  }
}

TEST(CudaReduction, IsDeterministicAndHandlesEmpty) {
  TITAN_REQUIRE_CUDA();
  const Tensor gx = on_cuda(random_cpu({3 << 20}, DType::f32, 5));
  EXPECT_EQ(ops::sum(gx).item(), ops::sum(gx).item());
  const Tensor empty = on_cuda(Tensor::empty({0, 4}));
  EXPECT_EQ(ops::sum(empty).item(), 0.0);
  EXPECT_TRUE(std::isnan(ops::mean(empty).item()));  // 0 / 0, as on the CPU
  EXPECT_THROW(ops::max(empty), Error);
}

// Many tensors of mixed dtypes and sizes (one empty) in one norm: the same
// tile sums as sum_squares, so the same 1e-6 relative bound.
TEST(CudaReduction, GlobalL2NormMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  std::vector<Tensor> cpu, gpu;
  for (int i = 0; i < 300; ++i) {
    const int64_t n = i == 7 ? 0 : (i * 977) % 9000 + 1;
    cpu.push_back(random_cpu({n}, i % 3 == 0 ? DType::bf16 : DType::f32, 100 + static_cast<uint64_t>(i)));
    gpu.push_back(on_cuda(cpu.back()));
  }
  const double expected = ops::global_l2_norm(cpu).item();
  EXPECT_NEAR(ops::global_l2_norm(gpu).item(), expected, 1e-6 * expected);
  EXPECT_EQ(ops::global_l2_norm(gpu).item(), ops::global_l2_norm(gpu).item());
  const std::vector<Tensor> only_empty{on_cuda(Tensor::empty({0}))};
  EXPECT_EQ(ops::global_l2_norm(only_empty).item(), 0.0);
}

// Each output element sums its inputs in double in the input's element order,
// as the CPU kernel does, then rounds once: the results are identical.
TEST(CudaReduction, SumToShapeMatchesCpuExactly) {
  TITAN_REQUIRE_CUDA();
  const std::vector<Shape> targets{{33, 1}, {5}, {7, 1, 5}, {1, 33, 1}, {1}, {7, 33, 5}, {2, 7, 33, 5}};
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = random_cpu({2, 7, 33, 5}, dtype, 21);
    for (const Shape& shape : targets) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " to " + shape_str(shape));
      const Tensor actual = ops::sum_to_shape(on_cuda(x), shape);
      EXPECT_EQ(actual.dtype(), dtype);
      EXPECT_TRUE(all_close(on_cpu(actual), ops::sum_to_shape(x, shape), 0.0, 0.0));
    }
  }
}

}  // namespace reduction_test
}  // namespace titan::testing
