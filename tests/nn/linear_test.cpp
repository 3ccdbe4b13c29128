// nn::Linear with a bias (Qwen 2's q/k/v projections): names, init, and the
// forward and every gradient against a naive float64 reference, in f32 and in
// bf16 mixed precision; the LoRA adapter still adds on top.
#include <gtest/gtest.h>

#include <random>

#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/nn/initialize.h"
#include "titan/nn/linear.h"
#include "titan/nn/lora.h"

namespace titan {
namespace linear_test {

// Row-major values, N(0, scale) rounded to bf16, so that the same numbers are
// exact in both dtypes and the reference sees exactly what the kernels see.
std::vector<float> bf16_exact_values(int64_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(engine);
  return Tensor::from_floats(values, {n}).to(DType::bf16).to(DType::f32).to_floats();
}

Tensor tensor_of(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_floats(std::vector<float>(values.begin(), values.end()), shape);
}

// y[n, o] = sum_i x[n, i] w[o, i] + b[o] and its gradients for upstream g, in double.
struct LinearReference {
  std::vector<double> y, grad_x, grad_w, grad_b;
};

LinearReference linear_reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                                 const std::vector<float>& g, int64_t rows, int64_t in, int64_t out) {
  LinearReference r;
  r.y.assign(static_cast<size_t>(rows * out), 0.0);
  r.grad_x.assign(static_cast<size_t>(rows * in), 0.0);
  r.grad_w.assign(static_cast<size_t>(out * in), 0.0);
  r.grad_b.assign(static_cast<size_t>(out), 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      const double grad = g[n * out + o];
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x[n * in + i]) * w[o * in + i];
        r.grad_x[n * in + i] += grad * w[o * in + i];
        r.grad_w[o * in + i] += grad * x[n * in + i];
      }
      r.y[n * out + o] = acc;
      r.grad_b[o] += grad;
    }
  }
  return r;
}

TEST(LinearBias, NamesShapesAndInit) {
  auto linear = nn::LinearConfig{.in_features = 6, .out_features = 4, .bias = true}.build();
  std::vector<std::string> names;
  for (auto& [name, parameter] : linear->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
  ASSERT_NE(linear->bias, nullptr);
  EXPECT_EQ(linear->bias->data.shape(), (Shape{4}));
  EXPECT_TRUE(linear->bias->data.requires_grad());
  titan::fill_(linear->bias->data, 3.0);
  Generator generator(7);
  linear->set_init(0.02);
  nn::initialize(*linear, generator.seed());
  EXPECT_EQ(linear->bias->data.to_floats(), std::vector<float>(4, 0.0f));  // init zeroes the bias
  EXPECT_GT(testing::max_abs(linear->weight->data), 0.0);

  auto plain = nn::LinearConfig{.in_features = 6, .out_features = 4}.build();
  EXPECT_EQ(plain->bias, nullptr);
  EXPECT_EQ(plain->named_parameters().size(), 1u);
}

TEST(LinearBias, RejectsABiasOfTheWrongShape) {
  const Tensor x = Tensor::zeros({3, 6}), w = Tensor::zeros({4, 6});
  EXPECT_THROW(F::linear(x, w, Tensor::zeros({5})), Error);
  EXPECT_THROW(F::linear(x, w, Tensor::zeros({1, 4})), Error);
}

class LinearBiasTest : public ::testing::TestWithParam<DType> {};

// Forward and every gradient against float64. f32: tolerance_for (a K = 37
// f32 dot product is ~1e-6 relative). bf16 (compute through a cast
// parametrization, f32 master weights): the output is rounded once to bf16
// after f32 accumulation onto the bias, the weight gradients come from the
// bf16-rounded upstream gradient, so tolerance_for(bf16) (2%).
TEST_P(LinearBiasTest, MatchesDoubleReference) {
  const DType dtype = GetParam();
  constexpr int64_t kBatch = 3, kSeq = 5, kIn = 37, kOut = 11, kRows = kBatch * kSeq;
  auto linear = nn::LinearConfig{.in_features = kIn, .out_features = kOut, .bias = true}.build();
  const auto x_values = bf16_exact_values(kRows * kIn, 1), w_values = bf16_exact_values(kOut * kIn, 2, 0.3);
  const auto b_values = bf16_exact_values(kOut, 3), g_values = bf16_exact_values(kRows * kOut, 4);
  titan::copy_(linear->weight->data, Tensor::from_floats(w_values, {kOut, kIn}));
  titan::copy_(linear->bias->data, Tensor::from_floats(b_values, {kOut}));
  if (dtype == DType::bf16) {
    for (auto& [name, parameter] : linear->named_parameters()) {
      parameter->parametrizations.push_back([](const Tensor& t) { return F::cast(t, DType::bf16); });
    }
  }
  Tensor x = Tensor::from_floats(x_values, {kBatch, kSeq, kIn}).to(dtype);
  x.set_requires_grad(true);
  const Tensor y = linear->forward(x);
  ASSERT_EQ(y.shape(), (Shape{kBatch, kSeq, kOut}));
  EXPECT_EQ(y.dtype(), dtype);
  autograd::backward({y}, {Tensor::from_floats(g_values, {kBatch, kSeq, kOut}).to(dtype)});

  const LinearReference ref = linear_reference(x_values, w_values, b_values, g_values, kRows, kIn, kOut);
  auto check = [&](const char* what, const Tensor& actual, const std::vector<double>& expected_values) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(actual.defined());
    const Tensor expected = tensor_of(expected_values, {static_cast<int64_t>(expected_values.size())});
    const auto tol = testing::tolerance_for(dtype, expected);
    EXPECT_TRUE(testing::all_close(actual.to(DType::f32).reshape({-1}), expected, tol.atol, tol.rtol));
  };
  check("y", y, ref.y);
  check("grad_x", x.grad(), ref.grad_x);
  check("grad_weight", linear->weight->data.grad(), ref.grad_w);
  check("grad_bias", linear->bias->data.grad(), ref.grad_b);
  EXPECT_EQ(linear->bias->data.grad().dtype(), DType::f32);  // the master gradient stays f32
}

INSTANTIATE_TEST_SUITE_P(DTypes, LinearBiasTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The adapter's output adds to the biased base output: y = x W^T + b + s B A x.
// The frozen base (LoRA's setting) gets no gradient; the bias stays out of the adapter.
TEST(LinearBias, LoraAdapterAddsOnTop) {
  constexpr int64_t kRows = 6, kIn = 10, kOut = 8, kRank = 2;
  auto linear = nn::LinearConfig{.in_features = kIn, .out_features = kOut, .bias = true}.build();
  const auto w_values = bf16_exact_values(kOut * kIn, 11, 0.3), b_values = bf16_exact_values(kOut, 12);
  titan::copy_(linear->weight->data, Tensor::from_floats(w_values, {kOut, kIn}));
  titan::copy_(linear->bias->data, Tensor::from_floats(b_values, {kOut}));
  for (auto& [name, parameter] : linear->named_parameters()) parameter->data.set_requires_grad(false);
  const nn::LoraConfig config{.in_features = kIn, .out_features = kOut, .rank = kRank, .alpha = 4.0};
  auto adapter = std::make_shared<nn::LoraAdapter>(config, Device::cpu(), nullptr);
  const auto a_values = bf16_exact_values(kRank * kIn, 13), b_lora_values = bf16_exact_values(kOut * kRank, 14);
  titan::copy_(adapter->lora_A->weight->data, Tensor::from_floats(a_values, {kRank, kIn}));
  titan::copy_(adapter->lora_B->weight->data, Tensor::from_floats(b_lora_values, {kOut, kRank}));
  linear->set_adapter(adapter);
  std::vector<std::string> names;
  for (auto& [name, parameter] : linear->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"}));

  const auto x_values = bf16_exact_values(kRows * kIn, 15);
  const Tensor y = linear->forward(Tensor::from_floats(x_values, {kRows, kIn}));
  std::vector<double> expected(static_cast<size_t>(kRows * kOut));
  const double scale = config.scale();
  for (int64_t n = 0; n < kRows; ++n) {
    std::vector<double> ax(kRank, 0.0);
    for (int64_t r = 0; r < kRank; ++r) {
      for (int64_t i = 0; i < kIn; ++i) ax[r] += static_cast<double>(a_values[r * kIn + i]) * x_values[n * kIn + i];
    }
    for (int64_t o = 0; o < kOut; ++o) {
      double acc = b_values[o];
      for (int64_t i = 0; i < kIn; ++i) acc += static_cast<double>(w_values[o * kIn + i]) * x_values[n * kIn + i];
      for (int64_t r = 0; r < kRank; ++r) acc += scale * b_lora_values[o * kRank + r] * ax[r];
      expected[n * kOut + o] = acc;
    }
  }
  const Tensor want = tensor_of(expected, {kRows, kOut});
  const auto tol = testing::tolerance_for(DType::f32, want);
  EXPECT_TRUE(testing::all_close(y, want, tol.atol, tol.rtol));
  autograd::backward({F::sum(y)});
  EXPECT_FALSE(linear->bias->data.grad().defined());
  EXPECT_TRUE(adapter->lora_B->weight->data.grad().defined());
}

}  // namespace linear_test
}  // namespace titan
