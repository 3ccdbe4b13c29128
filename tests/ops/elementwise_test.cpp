// Elementwise ops: SiLU, SwiGLU and GeGLU forward and backward against the
// float64 PyTorch reference in f32 and bf16; add, sub, mul, scale and their
// in-place forms; the errors that name op, device and dtype.
//
// CUDA elementwise ops against the CPU ones on the same inputs, in f32 and
// bf16, on sizes that are not multiples of the block size.
//
// Tolerances:
//  - add, sub, mul with alpha = 1 and scale are one correctly rounded f32
//    operation (then one rounding to bf16) on both backends: exact.
//  - a + alpha * b with alpha != 1 may be fused into an FMA on either side:
//    the product's rounding (half an ulp of |alpha * b| <= 1.2, so 6e-8) can
//    move the sum across one rounding boundary (one ulp of the result, 1.2e-7
//    relative): atol 1.2e-7, rtol 2.4e-7.
//  - silu and swiglu use exp, whose f32 implementations differ (CPU: a
//    polynomial to ~2 ulp; CUDA: expf, 2 ulp); through 1 / (1 + e) and the
//    products that is at most ~7 ulp, so rtol 2e-6 (~16 ulp). silu' =
//    s + x s (1 - s) passes through zero near x = -2.4, where terms of ~0.08
//    cancel: an absolute 2e-7 covers a few ulps of those terms.
//  - bf16: the f32 results above, each rounded once to bf16, differ by at most
//    one bf16 ulp (2^-7 relative) when they straddle a rounding boundary.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/ops/elementwise.h"

namespace titan {
namespace elementwise_test {

using testing::expect_matches_reference;
using testing::ReferenceCase;

class ElementwiseTest : public ::testing::TestWithParam<DType> {};

TEST_P(ElementwiseTest, Silu) {
  const DType dtype = GetParam();
  ReferenceCase ref("silu");
  const Tensor x = ref.get("x", dtype);
  expect_matches_reference(ops::silu(x), ref.get("y"), dtype);
  expect_matches_reference(ops::silu_backward(ref.get("grad_y", dtype), x), ref.get("grad_x"), dtype);
}

TEST_P(ElementwiseTest, Swiglu) {
  const DType dtype = GetParam();
  ReferenceCase ref("swiglu");
  const Tensor gate = ref.get("gate", dtype), up = ref.get("up", dtype);
  expect_matches_reference(ops::swiglu(gate, up), ref.get("y"), dtype);
  auto [grad_gate, grad_up] = ops::swiglu_backward(ref.get("grad_y", dtype), gate, up);
  expect_matches_reference(grad_gate, ref.get("grad_gate"), dtype);
  expect_matches_reference(grad_up, ref.get("grad_up"), dtype);
}

// gelu(approximate="tanh") is computed as x * sigmoid(2u) through the ~2 ulp
// fast exp: a few f32 ulp from float64, well inside the f32 tolerance.
TEST_P(ElementwiseTest, Geglu) {
  const DType dtype = GetParam();
  ReferenceCase ref("geglu");
  const Tensor gate = ref.get("gate", dtype), up = ref.get("up", dtype);
  expect_matches_reference(ops::geglu(gate, up), ref.get("y"), dtype);
  auto [grad_gate, grad_up] = ops::geglu_backward(ref.get("grad_y", dtype), gate, up);
  expect_matches_reference(grad_gate, ref.get("grad_gate"), dtype);
  expect_matches_reference(grad_up, ref.get("grad_up"), dtype);
}

INSTANTIATE_TEST_SUITE_P(DTypes, ElementwiseTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Elementwise, AddMulScaleAccumulate) {
  Tensor a = Tensor::from_floats(std::vector<float>{1, 2, 3}, {3});
  Tensor b = Tensor::from_floats(std::vector<float>{4, 5, 6}, {3});
  EXPECT_EQ(ops::add(a, b).to_floats(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(ops::sub(a, b).to_floats(), (std::vector<float>{-3, -3, -3}));
  EXPECT_EQ(ops::mul(a, b).to_floats(), (std::vector<float>{4, 10, 18}));
  EXPECT_EQ(ops::scale(a, 0.5f).to_floats(), (std::vector<float>{0.5f, 1, 1.5f}));
  ops::add_(a, b.to(DType::bf16), 2.0f);  // f32 += 2 * bf16
  EXPECT_EQ(a.to_floats(), (std::vector<float>{9, 12, 15}));
  EXPECT_THROW(ops::add(a, b.to(DType::bf16)), Error);
  EXPECT_THROW(ops::add(a, Tensor::zeros({4})), Error);
  EXPECT_THROW(ops::add_(b.to(DType::bf16), a), Error);
}

TEST(Elementwise, ErrorsNameOpDeviceAndDtype) {
  try {
    ops::silu(Tensor::zeros({4}, DType::i32));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("silu"), std::string::npos) << message;
    EXPECT_NE(message.find("i32"), std::string::npos) << message;
  }
  // A device whose backend registered no kernel: a clear error, not a crash.
  if (!ops::scale_kernels.has_kernel(DeviceType::cuda)) {
    float storage[4] = {};
    Tensor on_gpu = Tensor::from_blob(storage, {4}, DType::f32, Device::cuda(0));
    try {
      ops::scale_(on_gpu, 2.0f);
      FAIL() << "expected an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("op 'scale' has no kernel for device cuda:0"), std::string::npos)
          << error.what();
    }
  }
}

}  // namespace elementwise_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace elementwise_test {

const Shape kShapes[] = {{1}, {1000}, {257, 33}, {3, 5, 7}, {(1 << 16) + 5}};

void expect_close(const Tensor& cuda_result, const Tensor& cpu_result, double atol, double rtol) {
  ASSERT_TRUE(cuda_result.device().is_cuda());
  EXPECT_EQ(cuda_result.dtype(), cpu_result.dtype());
  EXPECT_TRUE(all_close(on_cpu(cuda_result), cpu_result, atol, rtol));
}

void expect_exact(const Tensor& cuda_result, const Tensor& cpu_result) {
  expect_close(cuda_result, cpu_result, 0.0, 0.0);
}

// f32: ~16 ulp; bf16: one bf16 ulp (see the header).
void expect_activation_close(const Tensor& cuda_result, const Tensor& cpu_result) {
  if (cpu_result.dtype() == DType::bf16) {
    expect_close(cuda_result, cpu_result, 1e-6, 1.0 / 128);
  } else {
    expect_close(cuda_result, cpu_result, 2e-7, 2e-6);
  }
}

class CudaElementwise : public ::testing::TestWithParam<DType> {};

TEST_P(CudaElementwise, AddSubMulScale) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor a = random_cpu(shape, dtype, 1, -3.0, 3.0), b = random_cpu(shape, dtype, 2, -3.0, 3.0);
    const Tensor da = on_cuda(a), db = on_cuda(b);
    expect_exact(ops::add(da, db), ops::add(a, b));
    expect_exact(ops::sub(da, db), ops::sub(a, b));
    expect_exact(ops::mul(da, db), ops::mul(a, b));
    expect_exact(ops::scale(da, 0.37f), ops::scale(a, 0.37f));
  }
}

TEST_P(CudaElementwise, InPlaceAccumulateAndScale) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor b = random_cpu(shape, dtype, 4, -3.0, 3.0);
    // dst += alpha * src: alpha = 1 is exact; alpha = -0.37 may be fused (see the header).
    for (float alpha : {1.0f, -0.37f}) {
      SCOPED_TRACE(alpha);
      Tensor host = random_cpu(shape, dtype, 3, -3.0, 3.0);
      Tensor device = on_cuda(host);
      ops::add_(host, b, alpha);
      ops::add_(device, on_cuda(b), alpha);
      if (alpha == 1.0f) {
        expect_exact(device, host);
      } else if (dtype == DType::bf16) {
        expect_close(device, host, 1.2e-7, 1.0 / 128);
      } else {
        expect_close(device, host, 1.2e-7, 2.4e-7);
      }
    }
    Tensor host = random_cpu(shape, dtype, 5, -3.0, 3.0);
    Tensor device = on_cuda(host);
    ops::scale_(host, -1.7f);
    ops::scale_(device, -1.7f);
    expect_exact(device, host);
  }
}

// The optimizer's and gradient accumulation's case: an f32 buffer += a bf16 gradient.
TEST(CudaElementwiseMixed, AccumulatesBf16IntoF32) {
  TITAN_REQUIRE_CUDA();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor grad = random_cpu(shape, DType::bf16, 6, -3.0, 3.0);
    for (float alpha : {1.0f, 0.25f, -0.37f}) {
      SCOPED_TRACE(alpha);
      Tensor host = random_cpu(shape, DType::f32, 7, -3.0, 3.0);
      Tensor device = on_cuda(host);
      ops::add_(host, grad, alpha);
      ops::add_(device, on_cuda(grad), alpha);
      // Exact unless alpha * grad is inexact in f32, so that an FMA matters (alpha = -0.37).
      if (alpha == -0.37f) {
        expect_close(device, host, 1.2e-7, 2.4e-7);
      } else {
        expect_exact(device, host);
      }
    }
  }
}

TEST_P(CudaElementwise, SiluForwardAndBackward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    // [-12, 12] reaches both saturated ends of the sigmoid.
    const Tensor x = random_cpu(shape, dtype, 8, -12.0, 12.0), grad = random_cpu(shape, dtype, 9);
    expect_activation_close(ops::silu(on_cuda(x)), ops::silu(x));
    expect_activation_close(ops::silu_backward(on_cuda(grad), on_cuda(x)), ops::silu_backward(grad, x));
  }
}

TEST_P(CudaElementwise, SwigluForwardAndBackward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor gate = random_cpu(shape, dtype, 10, -12.0, 12.0), up = random_cpu(shape, dtype, 11);
    const Tensor grad = random_cpu(shape, dtype, 12);
    expect_activation_close(ops::swiglu(on_cuda(gate), on_cuda(up)), ops::swiglu(gate, up));
    const auto [grad_gate, grad_up] = ops::swiglu_backward(on_cuda(grad), on_cuda(gate), on_cuda(up));
    const auto [expected_gate, expected_up] = ops::swiglu_backward(grad, gate, up);
    expect_activation_close(grad_gate, expected_gate);
    expect_activation_close(grad_up, expected_up);
  }
}

// gelu_tanh(x) = x sigmoid(2u) on both backends, so the swiglu bounds hold,
// except that gelu_tanh' = s + x s (1 - s) 2u' crosses zero near x = -0.75,
// where terms of ~0.22 cancel (the slope 2u' multiplies the error too): an
// absolute 1e-6 (~16 ulp of those terms) in f32. At x = -12, 2u = -142: CUDA's
// expf overflows to inf (s = 0) where the CPU's clamped exp gives s ~ 3e-39;
// both are zero within any atol.
TEST_P(CudaElementwise, GegluForwardAndBackward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const double atol = 1e-6, rtol = dtype == DType::f32 ? 2e-6 : 1.0 / 128;  // bf16: one bf16 ulp, as above
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor gate = random_cpu(shape, dtype, 13, -12.0, 12.0), up = random_cpu(shape, dtype, 14);
    const Tensor grad = random_cpu(shape, dtype, 15);
    expect_activation_close(ops::geglu(on_cuda(gate), on_cuda(up)), ops::geglu(gate, up));
    const auto [grad_gate, grad_up] = ops::geglu_backward(on_cuda(grad), on_cuda(gate), on_cuda(up));
    const auto [expected_gate, expected_up] = ops::geglu_backward(grad, gate, up);
    expect_close(grad_gate, expected_gate, atol, rtol);
    expect_activation_close(grad_up, expected_up);
  }
}

// gpt-oss's clamped SwiGLU: the swiglu bounds, on inputs spread across both
// clamps (limit 7: about a third of the gate and up values are clamped), whose
// cut-off gradients must be exact zeros on both backends.
TEST_P(CudaElementwise, ClampedSwigluForwardAndBackward) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor gate = random_cpu(shape, dtype, 16, -12.0, 12.0), up = random_cpu(shape, dtype, 17, -12.0, 12.0);
    const Tensor grad = random_cpu(shape, dtype, 18);
    expect_activation_close(ops::clamped_swiglu(on_cuda(gate), on_cuda(up), 1.702f, 7.0f),
                            ops::clamped_swiglu(gate, up, 1.702f, 7.0f));
    const auto [grad_gate, grad_up] =
        ops::clamped_swiglu_backward(on_cuda(grad), on_cuda(gate), on_cuda(up), 1.702f, 7.0f);
    const auto [expected_gate, expected_up] = ops::clamped_swiglu_backward(grad, gate, up, 1.702f, 7.0f);
    // As geglu's: s + alpha g s (1 - s) crosses zero (near g = -0.75) where its terms cancel, here times
    // (up + 1) of up to 8: an absolute 1e-5 in f32 (about 16 ulp of those products).
    expect_close(grad_gate, expected_gate, 1e-5, dtype == DType::f32 ? 2e-6 : 1.0 / 128);
    expect_activation_close(grad_up, expected_up);
  }
}

TEST(CudaElementwiseErrors, NonFloatDtypesAreRejected) {
  TITAN_REQUIRE_CUDA();
  const Tensor ints = Tensor::zeros({4}, DType::i32, Device::cuda());
  EXPECT_THROW(ops::silu(ints), Error);
  EXPECT_THROW(ops::add(ints, ints), Error);
  EXPECT_THROW(ops::scale(ints, 2.0f), Error);
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaElementwise, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace elementwise_test
}  // namespace titan::testing
