// Gated DeltaNet's short convolution (ops/causal_conv1d.h) against a naive
// float64 loop written here from the definition: the forward with packed
// documents, the gradients against central differences of that loop, bf16
// within one bf16 step, and the CUDA kernels against the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/ops/causal_conv1d.h"
#include "titan/ops/elementwise.h"

namespace titan {
namespace causal_conv1d_test {

using testing::random_cpu;

struct Conv {
  int64_t batch, tokens, channels, width;
  std::vector<int64_t> documents;  // [B * T]
};

// y = silu(causal depthwise conv), sources outside t's document or before the start counting as zero.
std::vector<double> naive_forward(const Conv& p, const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t c = 0; c < p.channels; ++c) {
        double u = 0.0;
        for (int64_t j = 0; j < p.width; ++j) {
          const int64_t s = t - (p.width - 1) + j;
          if (s < 0 || p.documents[b * p.tokens + s] != p.documents[b * p.tokens + t]) continue;
          u += w[c * p.width + j] * x[(b * p.tokens + s) * p.channels + c];
        }
        y[(b * p.tokens + t) * p.channels + c] = u / (1.0 + std::exp(-u));
      }
    }
  }
  return y;
}

std::vector<double> doubles(const Tensor& t) {
  const std::vector<float> f = t.to(DType::f32).to_floats();
  return {f.begin(), f.end()};
}

// Two rows: the first packs three documents (restarts at tokens 3 and 9), the second is one.
Conv packed_problem() {
  Conv p{2, 13, 5, 4, {}};
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = 0; t < p.tokens; ++t) p.documents.push_back(b == 0 ? (t >= 3) + (t >= 9) : 0);
  return p;
}

Tensor ids_of(const Conv& p) { return Tensor::from_vector(p.documents, {p.batch, p.tokens}); }

TEST(CausalConv1d, ForwardMatchesFloat64Loop) {
  const Conv p = packed_problem();
  const Tensor x = random_cpu({p.batch, p.tokens, p.channels}, DType::f32, 1, -2, 2);
  const Tensor w = random_cpu({p.channels, p.width}, DType::f32, 2);
  const Tensor y = ops::causal_conv1d_silu(x, w, ids_of(p));
  const std::vector<double> want = naive_forward(p, doubles(x), doubles(w));
  const std::vector<float> got = y.to_floats();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::abs(want[i]))) << i;
  // Without ids the first row is one document: its tokens after a restart now see the tokens before it.
  const Tensor joined = ops::causal_conv1d_silu(x, w);
  EXPECT_GT(testing::max_abs(ops::sub(joined, y)), 1e-3);
}

// d/dx and d/dw of sum(r * y) against central differences (step 1e-6) of the float64 loop.
TEST(CausalConv1d, GradientsMatchFiniteDifferences) {
  const Conv p = packed_problem();
  const Tensor x = random_cpu({p.batch, p.tokens, p.channels}, DType::f32, 3, -2, 2);
  const Tensor w = random_cpu({p.channels, p.width}, DType::f32, 4);
  const Tensor r = random_cpu({p.batch, p.tokens, p.channels}, DType::f32, 5);
  const auto [dx, dw] = ops::causal_conv1d_silu_backward(r, x, w, ids_of(p));
  std::vector<double> xv = doubles(x), wv = doubles(w);
  const std::vector<double> rv = doubles(r);
  const auto objective = [&] {
    const std::vector<double> y = naive_forward(p, xv, wv);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += rv[i] * y[i];
    return sum;
  };
  const double step = 1e-6;
  const auto check = [&](std::vector<double>& values, const Tensor& grad, const char* name) {
    const std::vector<float> got = grad.to_floats();
    for (size_t i = 0; i < values.size(); ++i) {
      const double keep = values[i];
      values[i] = keep + step;
      const double up = objective();
      values[i] = keep - step;
      const double down = objective();
      values[i] = keep;
      const double want = (up - down) / (2 * step);
      EXPECT_NEAR(got[i], want, 2e-5 * (1.0 + std::abs(want))) << name << " " << i;
    }
  };
  check(xv, dx, "x");
  check(wv, dw, "weight");
}

// bf16 x and weight: the float64 loop over the same bf16 values, within one bf16 step of the output.
TEST(CausalConv1d, Bf16WithinOneRounding) {
  const Conv p = packed_problem();
  const Tensor x = random_cpu({p.batch, p.tokens, p.channels}, DType::bf16, 6, -2, 2);
  const Tensor w = random_cpu({p.channels, p.width}, DType::bf16, 7);
  const Tensor y = ops::causal_conv1d_silu(x, w, ids_of(p));
  ASSERT_EQ(y.dtype(), DType::bf16);
  const std::vector<double> want = naive_forward(p, doubles(x), doubles(w));
  const std::vector<float> got = y.to(DType::f32).to_floats();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], std::abs(want[i]) / 128 + 1e-6) << i;
}

TEST(CausalConv1d, BadInputsNameTheTensor) {
  const Tensor x = random_cpu({1, 4, 3}, DType::f32, 8), w = random_cpu({2, 4}, DType::f32, 9);
  testing::expect_error([&] { ops::causal_conv1d_silu(x, w); },
                        {"causal_conv1d_silu", "weight is [2, 4], expected [C, K] with C = 3"});
  testing::expect_error(
      [&] {
        ops::causal_conv1d_silu(x, random_cpu({3, 4}, DType::f32, 9), Tensor::zeros({1, 5}, DType::i64));
      },
      {"document_ids is [1, 5], expected [B, T]"});
}

}  // namespace causal_conv1d_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace causal_conv1d_test {

// f32: the CPU sums in f64, CUDA in f32 (K = 4 terms, and the weight
// gradient's B x T terms in f64): 2e-5 relative. bf16: one bf16 step.
class CudaCausalConv1d : public ::testing::TestWithParam<DType> {};

TEST_P(CudaCausalConv1d, ForwardAndBackwardMatchCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t b = 2, t = 37, c = 24, k = 4;
  std::vector<int64_t> ids;
  for (int64_t row = 0; row < b; ++row)
    for (int64_t token = 0; token < t; ++token) ids.push_back((token >= 5) + (token >= 16));
  const Tensor documents = Tensor::from_vector(ids, {b, t});
  const Tensor x = random_cpu({b, t, c}, dtype, 1, -2, 2), w = random_cpu({c, k}, dtype, 2);
  const Tensor grad_y = random_cpu({b, t, c}, dtype, 3);
  const double tol = dtype == DType::bf16 ? 1.0 / 64 : 2e-5;
  const Tensor want = ops::causal_conv1d_silu(x, w, documents);
  const Tensor got = ops::causal_conv1d_silu(on_cuda(x), on_cuda(w), on_cuda(documents));
  EXPECT_TRUE(all_close(on_cpu(got), want, tol * max_abs(want), tol));
  const auto [dx, dw] = ops::causal_conv1d_silu_backward(grad_y, x, w, documents);
  const auto [cdx, cdw] = ops::causal_conv1d_silu_backward(on_cuda(grad_y), on_cuda(x), on_cuda(w), on_cuda(documents));
  EXPECT_TRUE(all_close(on_cpu(cdx), dx, tol * max_abs(dx), tol));
  EXPECT_TRUE(all_close(on_cpu(cdw), dw, tol * max_abs(dw), tol));
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaCausalConv1d, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace causal_conv1d_test
}  // namespace titan::testing
