// Device-side clipping ops against their definitions: the norm and factor in
// double (torch.nn.utils.clip_grad_norm_'s max_norm / (norm + 1e-6)), and
// scaling by a factor read from tensor memory.
//
// The device-side clipping ops on CUDA against the CPU kernels: the same
// double arithmetic for the scalars, the same f32 product for the scaling,
// so both must agree bitwise.
#include <gtest/gtest.h>

#include <cmath>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/grad_clip.h"

namespace titan {
namespace grad_clip_test {

TEST(GradClip, ScalarsAreTheNormAndTorchsFactor) {
  const float sum_squares = 7.25f;
  const Tensor s = Tensor::from_floats(std::vector<float>{sum_squares}, {1});
  const double norm = std::sqrt(static_cast<double>(sum_squares));
  for (double max_norm : {1.0, 2.0, 100.0, 0.0, -1.0}) {
    const std::vector<float> out = ops::clip_scalars(s, max_norm).to_floats();
    EXPECT_EQ(out[0], static_cast<float>(norm));
    const double factor = max_norm > 0.0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
    EXPECT_EQ(out[1], static_cast<float>(factor)) << "max_norm " << max_norm;
  }
  testing::expect_error([] { ops::clip_scalars(Tensor::zeros({2}), 1.0); }, {"clip_scalars", "2 elements"});
}

TEST(GradClip, ScaleByReadsTheFactorFromMemoryLikeScale) {
  const Tensor factors = Tensor::from_floats(std::vector<float>{0.0f, 0.37f}, {2});
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::from_floats(std::vector<float>{1.5f, -2.25f, 3.0f, 1e-3f}, {2, 2}, dtype);
    // Bitwise what ops::scale gives for the same factor: the same f32 product, rounded once.
    EXPECT_EQ(ops::scaled_by(x, factors, 1).to_floats(), ops::scale(x, 0.37f).to_floats()) << dtype_name(dtype);
    const Tensor y = x.clone();
    ops::scale_all_by_(std::vector<Tensor>{y}, factors, 1);
    EXPECT_EQ(y.to_floats(), ops::scale(x, 0.37f).to_floats());
  }
  const Tensor ones = Tensor::from_floats(std::vector<float>{1.0f}, {1});
  const Tensor x = Tensor::from_floats(std::vector<float>{4.0f, 5.0f}, {2});
  EXPECT_EQ(ops::scaled_by(x, ones, 0).to_floats(), x.to_floats());
  testing::expect_error([&] { ops::scaled_by(x, factors, 2); }, {"factor index 2", "2 factors"});
  testing::expect_error([&] { ops::scaled_by(x, Tensor::zeros({1}, DType::bf16), 0); }, {"scale_by"});
}

}  // namespace grad_clip_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace grad_clip_test {

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

}  // namespace grad_clip_test
}  // namespace titan::testing
