// nn::FeedForward's two activations, GeGLU (Gemma's gelu_pytorch_tanh) and
// SwiGLU (the default), forward and every gradient against a float64
// reference written from the textbook formulas (tanh, not the kernels'
// sigmoid form): a block that applied the wrong activation fails both.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/copy.h"
#include "titan/nn/feed_forward.h"

namespace titan {
namespace feed_forward_test {

using Matrix = std::vector<double>;  // row-major

std::vector<float> random_values(int64_t n, uint32_t seed, double scale) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(engine);
  return values;
}

// a [m, k] @ b[n, k]^T -> [m, n]
Matrix matmul_nt(const Matrix& a, const Matrix& b, int64_t m, int64_t k, int64_t n) {
  Matrix c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[j * k + p];
  return c;
}

// a [m, k] @ b [k, n] -> [m, n]
Matrix matmul_nn(const Matrix& a, const Matrix& b, int64_t m, int64_t k, int64_t n) {
  Matrix c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

// a [k, m]^T @ b [k, n] -> [m, n]
Matrix matmul_tn(const Matrix& a, const Matrix& b, int64_t k, int64_t m, int64_t n) {
  Matrix c(static_cast<size_t>(m * n), 0.0);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[p * m + i] * b[p * n + j];
  return c;
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;

// The activation and its derivative, from 0.5 x (1 + tanh(u)) and x sigmoid(x) directly.
std::pair<double, double> activation(nn::FeedForwardActivation kind, double x) {
  if (kind == nn::FeedForwardActivation::gelu_tanh) {
    const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
    return {0.5 * x * (1.0 + t),
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3 * 0.044715 * x * x)};
  }
  const double s = 1.0 / (1.0 + std::exp(-x));
  return {x * s, s + x * s * (1.0 - s)};
}

Tensor as_tensor(const Matrix& values, const Shape& shape) {
  return Tensor::from_floats(std::vector<float>(values.begin(), values.end()), shape);
}

void expect_close(const char* what, const Tensor& actual, const Matrix& expected_values, const Shape& shape) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(actual.defined());
  const Tensor expected = as_tensor(expected_values, shape);
  // f32 throughout; the activations use a ~2 ulp exp, the GEMMs sum <= 48 terms: tolerance_for(f32).
  const auto tol = testing::tolerance_for(DType::f32, expected);
  EXPECT_TRUE(testing::all_close(actual, expected, tol.atol, tol.rtol));
}

class FeedForwardTest : public ::testing::TestWithParam<nn::FeedForwardActivation> {};

TEST_P(FeedForwardTest, MatchesDoubleReference) {
  const nn::FeedForwardActivation kind = GetParam();
  constexpr int64_t kRows = 7, kDim = 16, kHidden = 48;
  auto ffn = nn::FeedForwardConfig{.dim = kDim, .hidden_dim = kHidden, .activation = kind}.build();
  const auto x_f = random_values(kRows * kDim, 1, 1.0), g_f = random_values(kRows * kDim, 2, 1.0);
  // Weights large enough that the gate reaches |a| ~ 3-4, where the two activations differ most.
  const auto w1_f = random_values(kHidden * kDim, 3, 0.5), w2_f = random_values(kDim * kHidden, 4, 0.2);
  const auto w3_f = random_values(kHidden * kDim, 5, 0.3);
  titan::copy_(ffn->w1->weight->data, Tensor::from_floats(w1_f, {kHidden, kDim}));
  titan::copy_(ffn->w2->weight->data, Tensor::from_floats(w2_f, {kDim, kHidden}));
  titan::copy_(ffn->w3->weight->data, Tensor::from_floats(w3_f, {kHidden, kDim}));
  Tensor x = Tensor::from_floats(x_f, {kRows, kDim});
  x.set_requires_grad(true);
  const Tensor y = ffn->forward(x);
  autograd::backward({y}, {Tensor::from_floats(g_f, {kRows, kDim})});

  const Matrix xd(x_f.begin(), x_f.end()), gd(g_f.begin(), g_f.end());
  const Matrix w1(w1_f.begin(), w1_f.end()), w2(w2_f.begin(), w2_f.end()), w3(w3_f.begin(), w3_f.end());
  const Matrix a = matmul_nt(xd, w1, kRows, kDim, kHidden), c = matmul_nt(xd, w3, kRows, kDim, kHidden);
  Matrix h(a.size()), act(a.size()), slope(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    std::tie(act[i], slope[i]) = activation(kind, a[i]);
    h[i] = act[i] * c[i];
  }
  const Matrix want_y = matmul_nt(h, w2, kRows, kHidden, kDim);
  const Matrix grad_h = matmul_nn(gd, w2, kRows, kDim, kHidden);
  Matrix grad_a(a.size()), grad_c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    grad_a[i] = grad_h[i] * c[i] * slope[i];
    grad_c[i] = grad_h[i] * act[i];
  }
  Matrix grad_x = matmul_nn(grad_a, w1, kRows, kHidden, kDim);
  const Matrix grad_x_up = matmul_nn(grad_c, w3, kRows, kHidden, kDim);
  for (size_t i = 0; i < grad_x.size(); ++i) grad_x[i] += grad_x_up[i];

  expect_close("y", y, want_y, {kRows, kDim});
  expect_close("grad_x", x.grad(), grad_x, {kRows, kDim});
  expect_close("grad w1", ffn->w1->weight->data.grad(), matmul_tn(grad_a, xd, kRows, kHidden, kDim), {kHidden, kDim});
  expect_close("grad w2", ffn->w2->weight->data.grad(), matmul_tn(gd, h, kRows, kDim, kHidden), {kDim, kHidden});
  expect_close("grad w3", ffn->w3->weight->data.grad(), matmul_tn(grad_c, xd, kRows, kHidden, kDim), {kHidden, kDim});
}

INSTANTIATE_TEST_SUITE_P(Activations, FeedForwardTest,
                         ::testing::Values(nn::FeedForwardActivation::silu, nn::FeedForwardActivation::gelu_tanh),
                         [](const auto& info) {
                           return info.param == nn::FeedForwardActivation::silu ? "silu" : "gelu_tanh";
                         });

TEST(FeedForward, DefaultsToSwigluAndKeepsItsNames) {
  auto ffn = nn::FeedForwardConfig{.dim = 8, .hidden_dim = 16}.build();
  EXPECT_EQ(ffn->config.activation, nn::FeedForwardActivation::silu);
  std::vector<std::string> names;
  for (auto& [name, parameter] : ffn->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"w1.weight", "w2.weight", "w3.weight"}));
}

}  // namespace feed_forward_test
}  // namespace titan
