// CUDA reductions against the CPU backend on the same inputs: sum, mean, max,
// sum of squares, the multi-tensor global norm and sum_to_shape, in f32 and
// bf16, at sizes that are not multiples of the 4096-element tile or the block.
#include <cmath>
#include <vector>

#include "cuda_test_support.h"
#include "titan/ops/reduction.h"

namespace titan::testing {
namespace {

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

}  // namespace
}  // namespace titan::testing
