// Elementwise ops, softmax, RMSNorm, embedding and RoPE, forward and
// backward, against the float64 PyTorch reference in f32 and bf16.
#include <gtest/gtest.h>

#include "support/reference.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/embedding.h"
#include "titan/ops/rms_norm.h"
#include "titan/ops/rope.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace {

using testing::ReferenceCase;

void expect_matches(const Tensor& actual, const Tensor& expected, DType dtype) {
  const auto tol = testing::tolerance_for(dtype, expected);
  EXPECT_EQ(actual.dtype(), dtype);
  EXPECT_TRUE(testing::all_close(actual, expected, tol.atol, tol.rtol));
}

class PointwiseTest : public ::testing::TestWithParam<DType> {};

TEST_P(PointwiseTest, Silu) {
  const DType dtype = GetParam();
  ReferenceCase ref("silu");
  const Tensor x = ref.get("x", dtype);
  expect_matches(ops::silu(x), ref.get("y"), dtype);
  expect_matches(ops::silu_backward(ref.get("grad_y", dtype), x), ref.get("grad_x"), dtype);
}

TEST_P(PointwiseTest, Swiglu) {
  const DType dtype = GetParam();
  ReferenceCase ref("swiglu");
  const Tensor gate = ref.get("gate", dtype), up = ref.get("up", dtype);
  expect_matches(ops::swiglu(gate, up), ref.get("y"), dtype);
  auto [grad_gate, grad_up] = ops::swiglu_backward(ref.get("grad_y", dtype), gate, up);
  expect_matches(grad_gate, ref.get("grad_gate"), dtype);
  expect_matches(grad_up, ref.get("grad_up"), dtype);
}

// gelu(approximate="tanh") is computed as x * sigmoid(2u) through the ~2 ulp
// fast exp: a few f32 ulp from float64, well inside the f32 tolerance.
TEST_P(PointwiseTest, Geglu) {
  const DType dtype = GetParam();
  ReferenceCase ref("geglu");
  const Tensor gate = ref.get("gate", dtype), up = ref.get("up", dtype);
  expect_matches(ops::geglu(gate, up), ref.get("y"), dtype);
  auto [grad_gate, grad_up] = ops::geglu_backward(ref.get("grad_y", dtype), gate, up);
  expect_matches(grad_gate, ref.get("grad_gate"), dtype);
  expect_matches(grad_up, ref.get("grad_up"), dtype);
}

TEST_P(PointwiseTest, Softmax) {
  const DType dtype = GetParam();
  ReferenceCase ref("softmax");
  const Tensor y = ops::softmax(ref.get("x", dtype));
  expect_matches(y, ref.get("y"), dtype);
  expect_matches(ops::softmax_backward(ref.get("grad_y", dtype), ref.get("y", dtype)), ref.get("grad_x"), dtype);
}

TEST_P(PointwiseTest, RmsNorm) {
  const DType dtype = GetParam();
  for (const char* name : {"rms_norm_small", "rms_norm_wide"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(name);
    const Tensor x = ref.get("x", dtype), w = ref.get("weight", dtype);
    ops::RmsNormOutput out = ops::rms_norm(x, w, static_cast<float>(ref.meta_double("eps")));
    expect_matches(out.y, ref.get("y"), dtype);
    ops::RmsNormGrads grads = ops::rms_norm_backward(ref.get("grad_y", dtype), x, w, out.rstd);
    expect_matches(grads.grad_x, ref.get("grad_x"), dtype);
    expect_matches(grads.grad_weight, ref.get("grad_weight"), dtype);
  }
}

TEST_P(PointwiseTest, Embedding) {
  const DType dtype = GetParam();
  ReferenceCase ref("embedding");
  const Tensor w = ref.get("weight", dtype), ids = ref.get("ids");
  expect_matches(ops::embedding(w, ids), ref.get("y"), dtype);
  const Tensor grad = ops::embedding_backward(ref.get("grad_y", dtype), ids, w.size(0), DType::f32);
  // Accumulated in f32 whatever the input dtype: bf16 only enters through the rounded grad_y.
  expect_matches(grad, ref.get("grad_weight"), DType::f32);
  EXPECT_THROW(ops::embedding(w, Tensor::full({2}, 50, DType::i64)), Error);
  EXPECT_THROW(ops::embedding(w, Tensor::full({2}, -1, DType::i64)), Error);
}

TEST_P(PointwiseTest, Rope) {
  const DType dtype = GetParam();
  for (const char* name : {"rope_interleaved", "rope_half", "rope_interleaved_llama31", "rope_half_llama31"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(name);
    ops::RopeScaling scaling;
    if (std::string(name).ends_with("llama31")) {
      scaling = {ref.meta_double("scaling_factor"), ref.meta_double("low_freq_factor"),
                 ref.meta_double("high_freq_factor"), ref.meta_int("original_max_position")};
    }
    const ops::RopeTable table = ops::rope_table(16, ref.meta_int("max_positions"), ref.meta_double("theta"), scaling);
    const ops::RopeStyle style = ref.meta("style") == "half" ? ops::RopeStyle::half : ops::RopeStyle::interleaved;
    const Tensor positions = ref.has("positions") ? ref.get("positions") : Tensor();
    const Tensor x = ref.get("x", dtype);
    expect_matches(ops::rope(x, table, positions, style), ref.get("y"), dtype);
    expect_matches(ops::rope(ref.get("grad_y", dtype), table, positions, style, /*inverse=*/true), ref.get("grad_x"),
                   dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, PointwiseTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Pointwise, AddMulScaleAccumulate) {
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

TEST(Pointwise, ErrorsNameOpDeviceAndDtype) {
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

}  // namespace
}  // namespace titan
