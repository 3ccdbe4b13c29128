// Rotary embedding (interleaved and half pairings, with Llama 3.1 scaling),
// forward and inverse, against the float64 PyTorch reference in f32 and bf16.
//
// CUDA rotary embedding against the CPU one on the same inputs and tables:
// both pairings, with and without (i32 and i64) positions, forward and
// inverse, f32 and bf16, head dims whose half is odd.
//
// Tolerances: each output is x0*c - x1*s (or x0*s + x1*c), which either side
// may compute with an FMA: the results differ by at most an ulp of the larger
// product plus an ulp of the result, both <= 2^-23 * max|x| for |c|, |s| <= 1:
// atol = rtol = 2.4e-7 * max|x|. bf16 outputs may in addition round to
// neighbouring values: one bf16 ulp, 2^-7 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/ops/rope.h"

namespace titan {
namespace rope_test {

using testing::expect_matches_reference;
using testing::ReferenceCase;

class RopeTest : public ::testing::TestWithParam<DType> {};

TEST_P(RopeTest, MatchesReference) {
  const DType dtype = GetParam();
  for (const char* name : {"rope_interleaved", "rope_half", "rope_interleaved_llama31", "rope_half_llama31"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(name);
    ops::RopeScaling scaling;
    if (std::string(name).ends_with("llama31")) {
      scaling = {.type = ops::RopeScalingType::llama3,
                 .factor = ref.meta_double("scaling_factor"),
                 .original_max_position = ref.meta_int("original_max_position"),
                 .low_freq_factor = ref.meta_double("low_freq_factor"),
                 .high_freq_factor = ref.meta_double("high_freq_factor")};
    }
    const ops::RopeTable table = ops::rope_table(16, ref.meta_int("max_positions"), ref.meta_double("theta"), scaling);
    const ops::RopeStyle style = ref.meta("style") == "half" ? ops::RopeStyle::half : ops::RopeStyle::interleaved;
    const Tensor positions = ref.has("positions") ? ref.get("positions") : Tensor();
    const Tensor x = ref.get("x", dtype);
    expect_matches_reference(ops::rope(x, table, positions, style), ref.get("y"), dtype);
    expect_matches_reference(ops::rope(ref.get("grad_y", dtype), table, positions, style, /*inverse=*/true),
                             ref.get("grad_x"), dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, RopeTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace rope_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace rope_test {

struct Case {
  Shape shape;  // [B, S, H, D]
  int64_t max_positions;
};
const Case kCases[] = {{{2, 5, 3, 16}, 64}, {{1, 7, 2, 6}, 8}, {{3, 33, 4, 128}, 100}};

void expect_close(const Tensor& cuda_result, const Tensor& cpu_result, DType dtype) {
  ASSERT_TRUE(cuda_result.device().is_cuda());
  EXPECT_EQ(cuda_result.dtype(), cpu_result.dtype());
  const double scale = max_abs(cpu_result);
  EXPECT_TRUE(all_close(on_cpu(cuda_result), cpu_result, 2.4e-7 * scale, dtype == DType::bf16 ? 1.0 / 128 : 2.4e-7));
}

// Positions restarting inside each sequence, as packed documents do.
Tensor packed_positions(int64_t batch, int64_t seq, int64_t max_positions, DType dtype) {
  std::vector<float> values;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) values.push_back(static_cast<float>((s * (b + 2)) % max_positions));
  }
  return Tensor::from_floats(values, {batch, seq}, dtype);
}

class CudaRope : public ::testing::TestWithParam<DType> {};

TEST_P(CudaRope, MatchesCpuForEveryLayoutAndPositionKind) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Case& c : kCases) {
    const int64_t batch = c.shape[0], seq = c.shape[1], head_dim = c.shape[3];
    const ops::RopeScaling scaling{.type = ops::RopeScalingType::llama3, .factor = 8.0, .original_max_position = 32};
    const ops::RopeTable host_table = ops::rope_table(head_dim, c.max_positions, 10000.0, scaling);
    const ops::RopeTable device_table = ops::rope_table(head_dim, c.max_positions, 10000.0, scaling, Device::cuda());
    const Tensor x = random_cpu(c.shape, dtype, 1, -2.0, 2.0);
    const Tensor device_x = on_cuda(x);
    for (DType position_dtype : {DType::f32, DType::i32, DType::i64}) {  // f32: no positions
      const Tensor positions =
          position_dtype == DType::f32 ? Tensor() : packed_positions(batch, seq, c.max_positions, position_dtype);
      const Tensor device_positions = positions.defined() ? on_cuda(positions) : Tensor();
      for (ops::RopeStyle style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
        for (bool inverse : {false, true}) {
          SCOPED_TRACE(shape_str(c.shape) +
                       (positions.defined() ? std::string(" positions ") + dtype_name(position_dtype)
                                            : std::string(" no positions")) +
                       (style == ops::RopeStyle::half ? " half" : " interleaved") + (inverse ? " inverse" : ""));
          expect_close(ops::rope(device_x, device_table, device_positions, style, inverse),
                       ops::rope(x, host_table, positions, style, inverse), dtype);
        }
      }
    }
  }
}

// The inverse rotation undoes the forward one (to rounding) on the GPU too.
TEST(CudaRopeInverse, UndoesTheForwardRotation) {
  TITAN_REQUIRE_CUDA();
  const ops::RopeTable table = ops::rope_table(32, 50, 500000.0, {}, Device::cuda());
  const Tensor x = on_cuda(random_cpu({2, 50, 4, 32}, DType::f32, 2));
  const Tensor back = ops::rope(ops::rope(x, table, Tensor(), ops::RopeStyle::half), table, Tensor(),
                                ops::RopeStyle::half, /*inverse=*/true);
  EXPECT_TRUE(all_close(on_cpu(back), on_cpu(x), 1e-6, 1e-6));
}

// The CPU throws for a position outside the table; the GPU cannot without a
// sync, so it marks that token's output NaN and leaves the others correct.
TEST(CudaRopeErrors, PositionOutsideTheTableGivesNaN) {
  TITAN_REQUIRE_CUDA();
  const ops::RopeTable table = ops::rope_table(8, 16, 10000.0, {}, Device::cuda());
  const Tensor x = random_cpu({1, 3, 2, 8}, DType::f32, 3);
  const Tensor positions = Tensor::from_vector<int64_t>({0, 16, 2}, {1, 3});
  const std::vector<float> out =
      on_cpu(ops::rope(on_cuda(x), table, on_cuda(positions), ops::RopeStyle::interleaved)).to_floats();
  for (size_t i = 0; i < out.size(); ++i) {
    const bool second_token = i >= 16 && i < 32;
    EXPECT_EQ(std::isnan(out[i]), second_token) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaRope, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace rope_test
}  // namespace titan::testing
