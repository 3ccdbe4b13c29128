// The device-side clipping ops on CUDA against the CPU kernels: the same
// double arithmetic for the scalars, the same f32 product for the scaling,
// so both must agree bitwise.
#include "titan/ops/grad_clip.h"
#include "cuda_test_support.h"

namespace titan::testing {
namespace {

TEST(CudaGradClip, ScalarsAndScalingMatchTheCpuBitwise) {
  TITAN_REQUIRE_CUDA();
  for (float sum_squares : {0.0f, 7.25f, 1e6f}) {
    const Tensor s = Tensor::from_floats(std::vector<float>{sum_squares}, {1});
    for (double max_norm : {1.0, 0.0}) {
      EXPECT_EQ(ops::clip_scalars(on_cuda(s), max_norm).to_floats(), ops::clip_scalars(s, max_norm).to_floats());
    }
  }
  const Tensor factors = Tensor::from_floats(std::vector<float>{1.0f, 0.37f}, {2});
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = random_cpu({1000, 33}, dtype, 5);
    for (int64_t index : {0, 1}) {
      EXPECT_EQ(ops::scaled_by(on_cuda(x), on_cuda(factors), index).to_floats(),
                ops::scaled_by(x, factors, index).to_floats())
          << dtype_name(dtype) << " factor " << index;
      const Tensor y = on_cuda(x);
      ops::scale_all_by_(std::vector<Tensor>{y}, on_cuda(factors), index);
      EXPECT_EQ(y.to_floats(), ops::scaled_by(x, factors, index).to_floats());
    }
  }
}

}  // namespace
}  // namespace titan::testing
