// Flash attention with a value head dim Dv other than the q/k one (DeepSeek's
// multi-head latent attention) and with gpt-oss's attention sinks, forward and
// backward (the sinks' gradient included):
//  - the flash op against the float64 PyTorch reference
//    (make_op_cases.py: attention_value_dim_sink_cases) in f32 and bf16, for
//    causal, full, sliding-window, document masks, GQA, decoding, and cases
//    spanning several of the CPU kernel's 128-row tiles;
//  - the naive path through autograd against the same reference;
//  - the sinks' gradient against central finite differences of the forward;
//  - on a machine with a GPU, the CUDA path (its fold and gradient kernels,
//    and the zero-padding that lets the one-D CUDA kernels take Dv != D)
//    against the CPU kernels.
//
// Tolerances are attention_test.cpp's (testing::tolerance_for: 2e-5 of the
// scale for f32, rtol 1e-2 / atol 1e-4 of the scale for bf16, where an output
// is rounded once). With sinks, the bf16 output is rounded twice (by the
// kernel, then after the sink shrinks it), still within that rtol. The sinks'
// gradient is f32 in both dtypes, summed from bf16 out and grad_out in the
// bf16 runs: it takes the bf16 tolerance there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "support/cuda.h"
#include "support/gradcheck.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/ops/attention.h"

namespace titan {
namespace attention_value_dim_sinks_test {

using testing::ReferenceCase;

void expect_close(const Tensor& actual, const Tensor& expected, DType tolerance_dtype, const char* what) {
  SCOPED_TRACE(what);
  const auto tol = testing::tolerance_for(tolerance_dtype, expected);
  ASSERT_EQ(actual.shape(), expected.shape());
  EXPECT_TRUE(testing::all_close(actual.to(DType::f32), expected, tol.atol, tol.rtol));
}

struct Problem {
  Tensor q, k, v, grad_y;
  ops::AttentionMask mask;
  float scale = 1.0f;
};

Problem load(const ReferenceCase& ref, DType dtype) {
  Problem p{ref.get("q", dtype), ref.get("k", dtype), ref.get("v", dtype), ref.get("grad_y", dtype), {}, 1.0f};
  p.scale = static_cast<float>(ref.meta_double("scale"));
  p.mask = ops::AttentionMask{ref.meta_int("causal") != 0, ref.meta_int("window"), {}};
  if (ref.has("document_ids")) p.mask.document_ids = ref.get("document_ids");
  if (ref.has("sinks")) p.mask.sinks = ref.get("sinks", DType::f32);
  return p;
}

class AttentionValueDimSinksTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(AttentionValueDimSinksTest, FlashMatchesReference) {
  const auto& [name, dtype] = GetParam();
  const ReferenceCase ref("attention_" + name);
  const Problem p = load(ref, dtype);
  const ops::AttentionOutput out = ops::flash_attention(p.q, p.k, p.v, p.mask, p.scale);
  ASSERT_EQ(out.out.shape(), (Shape{p.q.size(0), p.q.size(1), p.q.size(2), p.v.size(3)}));
  EXPECT_EQ(out.out.dtype(), dtype);
  expect_close(out.out, ref.get("y"), dtype, "y");

  const ops::AttentionGrads grads =
      ops::flash_attention_backward(p.grad_y, p.q, p.k, p.v, out.out, out.lse, p.mask, p.scale);
  expect_close(grads.grad_q, ref.get("grad_q"), dtype, "grad_q");
  expect_close(grads.grad_k, ref.get("grad_k"), dtype, "grad_k");
  expect_close(grads.grad_v, ref.get("grad_v"), dtype, "grad_v");
  ASSERT_EQ(grads.grad_sinks.defined(), p.mask.sinks.defined());
  if (!p.mask.sinks.defined()) return;
  EXPECT_EQ(grads.grad_sinks.dtype(), DType::f32);
  expect_close(grads.grad_sinks, ref.get("grad_sinks"), dtype, "grad_sinks");

  // The sinks take a visible share here: without them the output misses.
  ops::AttentionMask no_sinks = p.mask;
  no_sinks.sinks = Tensor();
  const auto tol = testing::tolerance_for(dtype, ref.get("y"));
  EXPECT_FALSE(testing::all_close(ops::flash_attention(p.q, p.k, p.v, no_sinks, p.scale).out.to(DType::f32),
                                  ref.get("y"), tol.atol, tol.rtol))
      << "the sinks change nothing here";
}

// The f32-only checks run once per case (a case name as the parameter).
class AttentionValueDimSinksF32Test : public ::testing::TestWithParam<std::string> {};
constexpr DType kF32 = DType::f32;

// The naive path (materialised scores, the sink as one more softmax column)
// through autograd; it computes in f32 whatever the input dtype.
TEST_P(AttentionValueDimSinksF32Test, NaiveMatchesReference) {
  const std::string& name = GetParam();
  const DType dtype = kF32;
  const ReferenceCase ref("attention_" + name);
  Problem p = load(ref, dtype);
  for (Tensor* t : {&p.q, &p.k, &p.v}) t->set_requires_grad(true);
  if (p.mask.sinks.defined()) p.mask.sinks.set_requires_grad(true);
  const Tensor out = F::scaled_dot_product_attention(p.q, p.k, p.v, p.mask, p.scale, F::AttentionImpl::naive);
  autograd::backward({F::sum(F::mul(out, p.grad_y))});
  expect_close(out.detach(), ref.get("y"), dtype, "y");
  expect_close(p.q.grad(), ref.get("grad_q"), dtype, "grad_q");
  expect_close(p.k.grad(), ref.get("grad_k"), dtype, "grad_k");
  expect_close(p.v.grad(), ref.get("grad_v"), dtype, "grad_v");
  if (p.mask.sinks.defined()) expect_close(p.mask.sinks.grad(), ref.get("grad_sinks"), dtype, "grad_sinks");
}

// The flash path's autograd function hands the sinks their gradient too (the
// cases with sinks; the op test above covers bf16).
class AttentionSinksAutogradTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionSinksAutogradTest, FlashAutogradMatchesReference) {
  const std::string& name = GetParam();
  const DType dtype = kF32;
  const ReferenceCase ref("attention_" + name);
  Problem p = load(ref, dtype);
  ASSERT_TRUE(p.mask.sinks.defined()) << name << " has no sinks";
  for (Tensor* t : {&p.q, &p.k, &p.v, &p.mask.sinks}) t->set_requires_grad(true);
  const Tensor out = F::scaled_dot_product_attention(p.q, p.k, p.v, p.mask, p.scale, F::AttentionImpl::flash);
  autograd::backward({F::sum(F::mul(out, p.grad_y))});
  expect_close(p.q.grad(), ref.get("grad_q"), dtype, "grad_q");
  expect_close(p.mask.sinks.grad(), ref.get("grad_sinks"), dtype, "grad_sinks");
}

const auto kValueDimCases =
    ::testing::Values("vdim_narrow", "vdim_wide_window_documents", "vdim_tiled_documents", "vdim_full");
const auto kSinkCases = ::testing::Values("sinks_causal", "sinks_full", "sinks_tiled_window",
                                          "sinks_vdim_documents_window", "sinks_decode");
const auto kCases = ::testing::Combine(
    ::testing::Values("vdim_narrow", "vdim_wide_window_documents", "vdim_tiled_documents", "vdim_full", "sinks_causal",
                      "sinks_full", "sinks_tiled_window", "sinks_vdim_documents_window", "sinks_decode"),
    ::testing::Values(DType::f32, DType::bf16));

std::string case_name(const ::testing::TestParamInfo<std::tuple<std::string, DType>>& info) {
  return std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(attention, AttentionValueDimSinksTest, kCases, case_name);
INSTANTIATE_TEST_SUITE_P(value_dims, AttentionValueDimSinksF32Test, kValueDimCases);
INSTANTIATE_TEST_SUITE_P(sinks, AttentionValueDimSinksF32Test, kSinkCases);
INSTANTIATE_TEST_SUITE_P(attention, AttentionSinksAutogradTest, kSinkCases);

// sum(out * grad_y) in f64, the function whose gradient flash_attention_backward gives.
double loss_of(const Problem& p, const Tensor& sinks) {
  ops::AttentionMask mask = p.mask;
  mask.sinks = sinks;
  const std::vector<float> out = ops::flash_attention(p.q, p.k, p.v, mask, p.scale).out.to_floats();
  const std::vector<float> grad = p.grad_y.to_floats();
  double total = 0.0;
  for (size_t i = 0; i < out.size(); ++i) total += static_cast<double>(out[i]) * static_cast<double>(grad[i]);
  return total;
}

// d loss / d sinks[h] = -sum over rows of p_sink (dO . O), against central
// differences with step 1e-2: the truncation error (h^2 / 6 times the third
// derivative, of the order of the gradient) and the f32 forward's noise
// (~1e-6 of the loss over 2h) both stay under 1e-3 of the largest gradient.
TEST(AttentionSinks, GradientMatchesFiniteDifferences) {
  const ReferenceCase ref("attention_sinks_tiled_window");
  const Problem p = load(ref, DType::f32);
  const ops::AttentionOutput out = ops::flash_attention(p.q, p.k, p.v, p.mask, p.scale);
  const std::vector<float> grad =
      ops::flash_attention_backward(p.grad_y, p.q, p.k, p.v, out.out, out.lse, p.mask, p.scale).grad_sinks.to_floats();
  const std::vector<float> sinks = p.mask.sinks.to_floats();
  const int64_t heads = p.mask.sinks.size(0);
  const float step = 1e-2f;
  double largest = 0.0;
  for (float g : grad) largest = std::max(largest, static_cast<double>(std::fabs(g)));
  ASSERT_GT(largest, 0.1) << "the sinks barely matter here: the check would prove little";
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<float> up = sinks, down = sinks;
    up[static_cast<size_t>(h)] += step;
    down[static_cast<size_t>(h)] -= step;
    const double numeric =
        (loss_of(p, Tensor::from_vector(up, {heads})) - loss_of(p, Tensor::from_vector(down, {heads}))) /
        (static_cast<double>(up[static_cast<size_t>(h)]) - down[static_cast<size_t>(h)]);
    EXPECT_NEAR(grad[static_cast<size_t>(h)], numeric, 1e-3 * largest) << "head " << h;
  }
}

// A row that sees no key puts all its weight on the sink: zeros out, lse = the sink.
TEST(AttentionSinks, RowWithNoVisibleKeyTakesTheSink) {
  const Tensor q = testing::random_leaf({1, 4, 2, 8}, 1).detach(), k = testing::random_leaf({1, 4, 1, 8}, 2).detach();
  const Tensor v = testing::random_leaf({1, 4, 1, 8}, 3).detach();
  ops::AttentionMask mask(true);
  mask.query_start = 0;
  mask.key_start = 2;  // queries 0 and 1 precede every key
  mask.sinks = Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, {2});
  const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, 0.3f);
  const std::vector<float> values = out.out.to_floats(), lse = out.lse.to_floats();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(lse[static_cast<size_t>(h * 4 + i)], h == 0 ? 0.5f : -1.0f);
      for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(values[static_cast<size_t>((i * 2 + h) * 8 + d)], 0.0f);
    }
  }
}

TEST(AttentionSinks, RejectsBadSinks) {
  const Tensor q = testing::random_leaf({1, 4, 2, 8}, 1).detach(), k = testing::random_leaf({1, 4, 1, 8}, 2).detach();
  ops::AttentionMask mask(true);
  mask.sinks = Tensor::zeros({3});
  EXPECT_THROW(ops::flash_attention(q, k, k, mask, 0.3f), Error);
  mask.sinks = Tensor::zeros({2}, DType::bf16);
  EXPECT_THROW(ops::flash_attention(q, k, k, mask, 0.3f), Error);
}

// What the CUDA path does for Dv != D (its kernels take one head dim): pad q,
// k and v with zeros to max(D, Dv), run, cut. Checked here on the CPU kernel
// against its own Dv != D path: zero features add nothing to any score and
// give zero output columns, so the two agree to rounding (f32 tolerance: the
// GEMMs may sum in another order over the wider dims).
Tensor padded(const Tensor& x, int64_t dim) {
  Shape shape = x.shape();
  shape[3] = dim;
  Tensor wide = Tensor::zeros(shape, x.dtype());
  titan::copy_(wide.narrow(3, 0, x.size(3)), x);
  return wide;
}

TEST(AttentionValueDim, ZeroPaddingToOneHeadDimChangesNothing) {
  const ReferenceCase ref("attention_sinks_vdim_documents_window");
  const Problem p = load(ref, DType::f32);
  const int64_t dim = p.q.size(3), value_dim = p.v.size(3), wide = std::max(dim, value_dim);
  ASSERT_NE(dim, value_dim);
  const ops::AttentionOutput direct = ops::flash_attention(p.q, p.k, p.v, p.mask, p.scale);
  const ops::AttentionOutput through =
      ops::flash_attention(padded(p.q, wide), padded(p.k, wide), padded(p.v, wide), p.mask, p.scale);
  expect_close(through.out.narrow(3, 0, value_dim).contiguous(), direct.out, DType::f32, "out");
  expect_close(through.lse, direct.lse, DType::f32, "lse");
  const ops::AttentionGrads want =
      ops::flash_attention_backward(p.grad_y, p.q, p.k, p.v, direct.out, direct.lse, p.mask, p.scale);
  const ops::AttentionGrads got =
      ops::flash_attention_backward(padded(p.grad_y, wide), padded(p.q, wide), padded(p.k, wide), padded(p.v, wide),
                                    through.out, through.lse, p.mask, p.scale);
  expect_close(got.grad_q.narrow(3, 0, dim).contiguous(), want.grad_q, DType::f32, "grad_q");
  expect_close(got.grad_k.narrow(3, 0, dim).contiguous(), want.grad_k, DType::f32, "grad_k");
  expect_close(got.grad_v.narrow(3, 0, value_dim).contiguous(), want.grad_v, DType::f32, "grad_v");
  expect_close(got.grad_sinks, want.grad_sinks, DType::f32, "grad_sinks");
}

// ---- CUDA against the CPU kernels ----

class CudaAttentionValueDimSinksTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(CudaAttentionValueDimSinksTest, MatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const auto& [name, dtype] = GetParam();
  const ReferenceCase ref("attention_" + name);
  const Problem cpu = load(ref, dtype);
  Problem gpu = cpu;
  for (Tensor* t : {&gpu.q, &gpu.k, &gpu.v, &gpu.grad_y}) *t = testing::on_cuda(*t);
  if (cpu.mask.document_ids.defined()) gpu.mask.document_ids = testing::on_cuda(cpu.mask.document_ids);
  if (cpu.mask.sinks.defined()) gpu.mask.sinks = testing::on_cuda(cpu.mask.sinks);
  const ops::AttentionOutput expected = ops::flash_attention(cpu.q, cpu.k, cpu.v, cpu.mask, cpu.scale);
  const ops::AttentionOutput actual = ops::flash_attention(gpu.q, gpu.k, gpu.v, gpu.mask, gpu.scale);
  // The tensor-core kernels round their product operands to bf16: attention_test.cpp's bound (atol 6e-3 of the scale).
  const auto check = [&](const Tensor& a, const Tensor& e, const char* what) {
    SCOPED_TRACE(what);
    const Tensor host = testing::on_cpu(a).to(DType::f32), want = e.to(DType::f32);
    const double rtol = dtype == DType::f32 ? 1e-4 : 1e-2, atol = (dtype == DType::f32 ? 2e-5 : 6e-3);
    EXPECT_TRUE(testing::all_close(host, want, atol * testing::max_abs(want), rtol));
  };
  check(actual.out, expected.out, "out");
  check(actual.lse, expected.lse, "lse");
  const ops::AttentionGrads want =
      ops::flash_attention_backward(cpu.grad_y, cpu.q, cpu.k, cpu.v, expected.out, expected.lse, cpu.mask, cpu.scale);
  const ops::AttentionGrads got =
      ops::flash_attention_backward(gpu.grad_y, gpu.q, gpu.k, gpu.v, actual.out, actual.lse, gpu.mask, gpu.scale);
  check(got.grad_q, want.grad_q, "grad_q");
  check(got.grad_k, want.grad_k, "grad_k");
  check(got.grad_v, want.grad_v, "grad_v");
  if (want.grad_sinks.defined()) check(got.grad_sinks, want.grad_sinks, "grad_sinks");
}

INSTANTIATE_TEST_SUITE_P(attention, CudaAttentionValueDimSinksTest, kCases, case_name);

}  // namespace attention_value_dim_sinks_test
}  // namespace titan
