// Gated DeltaNet's gates (ops/gdn_gates.h) against float64 formulas written
// here: g = -exp(A_log) softplus(a + dt_bias) (PyTorch's softplus, identity
// above 20) and beta = sigmoid(b); their gradients against central
// differences of those formulas; bf16 inputs; the CUDA kernels against the
// CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/ops/gdn_gates.h"

namespace titan {
namespace gdn_gates_test {

using testing::random_cpu;

double softplus(double u) { return u > 20.0 ? u : std::log1p(std::exp(u)); }

std::vector<double> doubles(const Tensor& t) {
  const std::vector<float> f = t.to(DType::f32).to_floats();
  return {f.begin(), f.end()};
}

struct Inputs {
  std::vector<double> a, b, a_log, dt_bias;
  int64_t heads;
};

// sum(rg * g + rb * beta), the objective whose gradients the backward gives for output gradients rg, rb.
double objective(const Inputs& in, const std::vector<double>& rg, const std::vector<double>& rb) {
  double sum = 0.0;
  for (size_t i = 0; i < in.a.size(); ++i) {
    const size_t h = i % static_cast<size_t>(in.heads);
    sum += rg[i] * -std::exp(in.a_log[h]) * softplus(in.a[i] + in.dt_bias[h]);
    sum += rb[i] / (1.0 + std::exp(-in.b[i]));
  }
  return sum;
}

// a spans both sides of softplus's threshold (a + dt_bias up to 24).
struct Case {
  Tensor a, b, a_log, dt_bias;
};
Case make_case(DType dtype) {
  const int64_t batch = 2, tokens = 7, heads = 3;
  return {random_cpu({batch, tokens, heads}, dtype, 1, -6, 22), random_cpu({batch, tokens, heads}, dtype, 2, -4, 4),
          random_cpu({heads}, DType::f32, 3, std::log(0.01), std::log(16.0)),
          random_cpu({heads}, DType::f32, 4, 0.5, 2.0)};
}

TEST(GdnGates, ForwardMatchesFloat64Formulas) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Case c = make_case(dtype);
    const ops::GdnGates out = ops::gdn_gates(c.a, c.b, c.a_log, c.dt_bias);
    ASSERT_EQ(out.g.dtype(), DType::f32);
    const std::vector<double> a = doubles(c.a), b = doubles(c.b), al = doubles(c.a_log), dt = doubles(c.dt_bias);
    const std::vector<float> g = out.g.to_floats(), beta = out.beta.to_floats();
    for (size_t i = 0; i < a.size(); ++i) {
      const size_t h = i % 3;
      const double want_g = -std::exp(al[h]) * softplus(a[i] + dt[h]), want_beta = 1.0 / (1.0 + std::exp(-b[i]));
      EXPECT_NEAR(g[i], want_g, 1e-6 * (1.0 + std::abs(want_g))) << dtype_name(dtype) << " " << i;
      EXPECT_NEAR(beta[i], want_beta, 1e-7) << dtype_name(dtype) << " " << i;
    }
  }
}

TEST(GdnGates, GradientsMatchFiniteDifferences) {
  const Case c = make_case(DType::f32);
  const Tensor rg = random_cpu(c.a.shape(), DType::f32, 5), rb = random_cpu(c.a.shape(), DType::f32, 6);
  const ops::GdnGateGrads grads = ops::gdn_gates_backward(rg, rb, c.a, c.b, c.a_log, c.dt_bias);
  Inputs in{doubles(c.a), doubles(c.b), doubles(c.a_log), doubles(c.dt_bias), 3};
  const std::vector<double> rgv = doubles(rg), rbv = doubles(rb);
  const double step = 1e-6;
  const auto check = [&](std::vector<double>& values, const Tensor& grad, const char* name) {
    const std::vector<float> got = grad.to_floats();
    ASSERT_EQ(got.size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      const double keep = values[i];
      values[i] = keep + step;
      const double up = objective(in, rgv, rbv);
      values[i] = keep - step;
      const double down = objective(in, rgv, rbv);
      values[i] = keep;
      const double want = (up - down) / (2 * step);
      EXPECT_NEAR(got[i], want, 1e-4 * (1.0 + std::abs(want))) << name << " " << i;
    }
  };
  check(in.a, grads.grad_a, "a");
  check(in.b, grads.grad_b, "b");
  check(in.a_log, grads.grad_a_log, "A_log");
  check(in.dt_bias, grads.grad_dt_bias, "dt_bias");
  // An output that received no gradient counts as zeros.
  const ops::GdnGateGrads only_beta = ops::gdn_gates_backward(Tensor(), rb, c.a, c.b, c.a_log, c.dt_bias);
  EXPECT_EQ(testing::max_abs(only_beta.grad_a), 0.0);
  EXPECT_EQ(testing::max_abs(only_beta.grad_a_log), 0.0);
  EXPECT_TRUE(testing::all_close(only_beta.grad_b, grads.grad_b, 0, 0));
}

TEST(GdnGates, BadInputsNameTheTensor) {
  const Case c = make_case(DType::f32);
  testing::expect_error([&] { ops::gdn_gates(c.a, c.b, random_cpu({2}, DType::f32, 7), c.dt_bias); },
                        {"gdn_gates", "A_log [2] and dt_bias [3] must be [H] = [3]"});
}

}  // namespace gdn_gates_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace gdn_gates_test {

// The CPU computes in f64, CUDA in f32 (expf, log1pf): 2e-5 relative; bf16
// gradients within one bf16 step.
class CudaGdnGates : public ::testing::TestWithParam<DType> {};

TEST_P(CudaGdnGates, ForwardAndBackwardMatchCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t batch = 3, tokens = 41, heads = 8;
  const Tensor a = random_cpu({batch, tokens, heads}, dtype, 1, -6, 22), b = random_cpu(a.shape(), dtype, 2, -4, 4);
  const Tensor a_log = random_cpu({heads}, DType::f32, 3, -4, 2.7), dt_bias = random_cpu({heads}, DType::f32, 4);
  const Tensor rg = random_cpu(a.shape(), DType::f32, 5), rb = random_cpu(a.shape(), DType::f32, 6);
  const ops::GdnGates want = ops::gdn_gates(a, b, a_log, dt_bias);
  const ops::GdnGates got = ops::gdn_gates(on_cuda(a), on_cuda(b), on_cuda(a_log), on_cuda(dt_bias));
  EXPECT_TRUE(all_close(on_cpu(got.g), want.g, 2e-5 * max_abs(want.g), 2e-5));
  EXPECT_TRUE(all_close(on_cpu(got.beta), want.beta, 2e-5, 2e-5));
  const ops::GdnGateGrads gw = ops::gdn_gates_backward(rg, rb, a, b, a_log, dt_bias);
  const ops::GdnGateGrads gc =
      ops::gdn_gates_backward(on_cuda(rg), on_cuda(rb), on_cuda(a), on_cuda(b), on_cuda(a_log), on_cuda(dt_bias));
  for (const auto& [c, e] : {std::pair{gc.grad_a, gw.grad_a}, std::pair{gc.grad_b, gw.grad_b},
                             std::pair{gc.grad_a_log, gw.grad_a_log}, std::pair{gc.grad_dt_bias, gw.grad_dt_bias}}) {
    const double tol = e.dtype() == DType::bf16 ? 1.0 / 64 : 2e-5;
    EXPECT_TRUE(all_close(on_cpu(c), e, tol * max_abs(e), tol));
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaGdnGates, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace gdn_gates_test
}  // namespace titan::testing
