// titan's CUDA ops against PyTorch's own kernels on the same GPU: cuBLAS
// matmuls, RMSNorm, softmax, SiLU/SwiGLU, embedding, cross-entropy, SDPA
// (causal, GQA), RoPE (half pairing) and fused AdamW, in f32 and bf16. The
// other tests here check each CUDA kernel against titan's CPU backend (itself
// checked against float64 PyTorch); these check the GPU results against what a
// PyTorch training run on this GPU computes from the same inputs.
//
// The cases are written on the GPU machine by
// tests/reference/make_torch_cuda_cases.py (scripts/gpu_check.sh runs it and
// sets TITAN_TORCH_CUDA_CASES to its folder): one file per case and dtype,
// <case>_<dtype>.safetensors, with bf16-representable inputs stored as f32,
// PyTorch's outputs and gradients as f32 (bf16 ones convert exactly) and the
// dtype PyTorch produced each in as metadata. The case names below are the
// script's. Without a GPU, without the variable or without a case's file
// (the script failed for it) a test is skipped, saying which.
//
// Tolerances, relative to scale = max |expected| (each use says which):
//  - f32 (tolerance_for(f32): 2e-5 of the scale, 1e-4 relative): both sides
//    compute in f32 from the same inputs and differ in summation order and in
//    exp/rsqrt implementations (a few ulp), ~sqrt(n) * 2^-24 of the terms;
//    a wrong term is orders of magnitude larger.
//  - bf16 rounded once (1e-4 of the scale, 1e-2 relative): where PyTorch's
//    bf16 kernel computes in f32 and rounds its result once, as titan's do
//    (for composed ops the script upcasts, for the same reason). The f32
//    values differ as above; rounding two values a hair apart can land on
//    neighbouring bf16 values, at most 2^-7 relative apart.
//  - GEMMs, attention, embedding backward and AdamW: their own, below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "support/cuda.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/ops/adamw.h"
#include "titan/ops/attention.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/embedding.h"
#include "titan/ops/gemm.h"
#include "titan/ops/rms_norm.h"
#include "titan/ops/rope.h"
#include "titan/ops/softmax.h"

namespace titan::testing {
namespace torch_cuda_test {

constexpr const char* kCasesVariable = "TITAN_TORCH_CUDA_CASES";

// One case file: inputs go to the GPU in the case's dtype, expected values
// stay on the host as stored.
class TorchCase {
 public:
  // Opens <dir>/<name>_<dtype>.safetensors, or says in `why_not` why not.
  static std::optional<TorchCase> open(const std::string& name, DType dtype, std::string& why_not) {
    const char* dir = std::getenv(kCasesVariable);
    if (dir == nullptr || *dir == '\0') {
      why_not = std::string(kCasesVariable) +
                " is not set: scripts/gpu_check.sh writes the PyTorch cases with "
                "tests/reference/make_torch_cuda_cases.py and sets it";
      return std::nullopt;
    }
    const std::string path = std::string(dir) + "/" + name + "_" + dtype_name(dtype) + ".safetensors";
    if (!std::filesystem::exists(path)) {
      why_not = "no " + path + " (make_torch_cuda_cases.py did not write it: see its output)";
      return std::nullopt;
    }
    return TorchCase(path, dtype);
  }

  DType dtype() const { return dtype_; }
  bool has(const std::string& tensor) const { return reader_->contains(tensor); }
  // As stored: f32 values, i64 ids, on the host.
  Tensor expected(const std::string& tensor) const { return reader_->read(tensor); }
  // Floating inputs in the case's dtype (an exact cast: the values are
  // bf16-representable), ids as stored; on the GPU.
  Tensor input(const std::string& tensor) const {
    const Tensor stored = reader_->read(tensor);
    return on_cuda(is_floating(stored.dtype()) ? stored.to(dtype_) : stored);
  }
  std::string meta(const std::string& key) const {
    const auto found = reader_->header().metadata.find(key);
    TITAN_CHECK(found != reader_->header().metadata.end(), "{}: no metadata '{}'", reader_->path(), key);
    return found->second;
  }
  double meta_double(const std::string& key) const { return std::stod(meta(key)); }
  int64_t meta_int(const std::string& key) const { return std::stoll(meta(key)); }

  // Compares a titan result (on the GPU) with PyTorch's `name`: the same
  // dtype as PyTorch produced it in, values within `tol`.
  void expect_close(const Tensor& actual, const std::string& name, Tolerance tol) const {
    SCOPED_TRACE(name);
    ASSERT_TRUE(actual.device().is_cuda());
    EXPECT_EQ(dtype_name(actual.dtype()), dtype_name(parse_dtype(meta("dtype." + name))));
    EXPECT_TRUE(all_close(on_cpu(actual), expected(name), tol.atol, tol.rtol));
  }

 private:
  TorchCase(const std::string& path, DType dtype)
      : reader_(std::make_shared<checkpoint::SafetensorsReader>(path)), dtype_(dtype) {
    TITAN_CHECK(meta("dtype") == dtype_name(dtype), "{}: written for {}", path, meta("dtype"));
  }

  std::shared_ptr<checkpoint::SafetensorsReader> reader_;
  DType dtype_;
};

// The first lines of every test here: skip (saying why) without a GPU or
// without this case's file, else `var` is the open case.
#define TITAN_OPEN_TORCH_CASE(var, name, dtype)                                              \
  TITAN_REQUIRE_CUDA();                                                                      \
  std::string var##_why_not;                                                                 \
  const std::optional<TorchCase> var##_opened = TorchCase::open(name, dtype, var##_why_not); \
  if (!var##_opened) GTEST_SKIP() << var##_why_not;                                          \
  const TorchCase& var = *var##_opened

double scale_of(const Tensor& expected) { return std::max(max_abs(expected), 1e-30); }

Tolerance f32_tolerance(const TorchCase& c, const std::string& name) {
  return tolerance_for(DType::f32, c.expected(name));
}
Tolerance rounded_once(const TorchCase& c, const std::string& name) {
  return {1e-4 * scale_of(c.expected(name)), 1e-2};
}
// The common case: f32, or bf16 rounded once.
Tolerance usual(const TorchCase& c, const std::string& name) {
  return c.dtype() == DType::f32 ? f32_tolerance(c, name) : rounded_once(c, name);
}

// Parameters: a case name (as the script writes it) and a dtype.
using Param = std::tuple<const char*, DType>;
std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = std::get<0>(info.param);
  return name + "_" + dtype_name(std::get<1>(info.param));
}
const auto kDtypes = ::testing::Values(DType::f32, DType::bf16);

class TorchMatmul : public ::testing::TestWithParam<Param> {};
class TorchRmsNorm : public ::testing::TestWithParam<Param> {};
class TorchSoftmax : public ::testing::TestWithParam<Param> {};
class TorchElementwise : public ::testing::TestWithParam<Param> {};
class TorchEmbedding : public ::testing::TestWithParam<Param> {};
class TorchCrossEntropy : public ::testing::TestWithParam<Param> {};
class TorchAttention : public ::testing::TestWithParam<Param> {};
class TorchRope : public ::testing::TestWithParam<Param> {};
class TorchAdamW : public ::testing::TestWithParam<Param> {};

// --- matmul ---------------------------------------------------------------

// Elementwise |t| as a contiguous f32 host tensor.
Tensor abs_of(const Tensor& t) {
  std::vector<float> values = t.to_floats();
  for (float& v : values) v = std::fabs(v);
  return Tensor::from_floats(values, t.shape());
}

// A and B are stored as the script made them; "transpose_*" says the operand
// is the transposed view of that storage (unit stride down its rows, as a
// transposed weight has), on both sides.
//
// Tolerance: an output element is a K-term f32 sum (bf16 products are exact in
// f32; the script turns off TF32 and bf16 partial sums in cuBLAS), and cuBLAS
// and titan's GEMM round their partial sums in their own orders: they differ
// by about sqrt(K) * 2^-24 * max(|A| @ |B|), the scale the rounding errors
// are relative to. 16x that covers split-K and tensor-core accumulation with
// a wide margin, while one wrong term (~1/K of that sum) is far outside. A
// bf16 output adds one bf16 ulp, 2^-7 relative.
TEST_P(TorchMatmul, MatchesTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  const bool ta = c.meta_int("transpose_a") != 0, tb = c.meta_int("transpose_b") != 0;
  const Tensor a_host = ta ? c.expected("a").transpose(-1, -2) : c.expected("a");
  const Tensor b_host = tb ? c.expected("b").transpose(-1, -2) : c.expected("b");
  const Tensor a = ta ? c.input("a").transpose(-1, -2) : c.input("a");
  const Tensor b = tb ? c.input("b").transpose(-1, -2) : c.input("b");
  const double k = static_cast<double>(a.size(-1));
  const double atol = 16.0 * std::sqrt(k) * std::ldexp(1.0, -24) * max_abs(ops::matmul(abs_of(a_host), abs_of(b_host)));
  c.expect_close(ops::matmul(a, b), "c", {atol, c.dtype() == DType::bf16 ? std::ldexp(1.0, -7) : 0.0});
  if (c.dtype() == DType::bf16) {
    // bf16 operands into an f32 result (the logits and the fused loss's GEMMs).
    c.expect_close(ops::matmul(a, b, DType::f32), "c_f32", {atol, 0.0});
  }
}

INSTANTIATE_TEST_SUITE_P(torch, TorchMatmul,
                         ::testing::Combine(::testing::Values("matmul_nn", "matmul_nt", "matmul_tn",
                                                              "matmul_batched_tt", "matmul_long_k"),
                                            kDtypes),
                         param_name);

// --- RMSNorm, softmax, SiLU, SwiGLU -----------------------------------------

// PyTorch: y = x * rsqrt(mean(x^2) + eps) * w in f32 (bf16 inputs upcast, the
// result rounded once) and its autograd backward. titan's backward takes the
// rstd of its own forward. grad_x cancels little for random inputs (the
// projection term is ~1/D of the other) and grad_weight sums over 74 or 165
// rows: f32 tolerance, or bf16 rounded once.
TEST_P(TorchRmsNorm, ForwardAndBackwardMatchTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  const Tensor x = c.input("x"), weight = c.input("weight");
  const ops::RmsNormOutput out = ops::rms_norm(x, weight, static_cast<float>(c.meta_double("eps")));
  c.expect_close(out.y, "y", usual(c, "y"));
  const ops::RmsNormGrads grads = ops::rms_norm_backward(c.input("grad_y"), x, weight, out.rstd);
  c.expect_close(grads.grad_x, "grad_x", usual(c, "grad_x"));
  c.expect_close(grads.grad_weight, "grad_weight", usual(c, "grad_weight"));
}

INSTANTIATE_TEST_SUITE_P(torch, TorchRmsNorm,
                         ::testing::Combine(::testing::Values("rms_norm_d2048", "rms_norm_d96"), kDtypes), param_name);

// PyTorch's softmax kernels (bf16 natively: f32 inside, one rounding). The
// backward y * (dy - sum(dy * y)) is given PyTorch's y, as its autograd was,
// so only the backward's own rounding differs; its cancellation when dy ~ dot
// is ~1e-6 of the row's terms, inside 2e-5 of the scale. A 32003-wide row
// checks the multi-block rows of a vocabulary.
TEST_P(TorchSoftmax, ForwardAndBackwardMatchTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  c.expect_close(ops::softmax(c.input("x")), "y", usual(c, "y"));
  c.expect_close(ops::softmax_backward(c.input("grad_y"), c.input("y")), "grad_x", usual(c, "grad_x"));
}

INSTANTIATE_TEST_SUITE_P(torch, TorchSoftmax,
                         ::testing::Combine(::testing::Values("softmax_rows", "softmax_vocab"), kDtypes), param_name);

// silu: PyTorch's own kernels (bf16 natively, f32 inside). swiglu: silu(gate)
// * up in f32 on the bf16 inputs, rounded once. Both expf-based: a few ulp.
// Near silu's minimum (x ~ -1.28) the input gradient crosses zero, where the
// relative error is unbounded but the absolute one stays ~1e-7 of the scale.
TEST_P(TorchElementwise, ForwardAndBackwardMatchTorch) {
  const std::string name = std::get<0>(GetParam());
  TITAN_OPEN_TORCH_CASE(c, name, std::get<1>(GetParam()));
  if (name == "silu") {
    const Tensor x = c.input("x");
    c.expect_close(ops::silu(x), "y", usual(c, "y"));
    c.expect_close(ops::silu_backward(c.input("grad_y"), x), "grad_x", usual(c, "grad_x"));
  } else {
    const Tensor gate = c.input("gate"), up = c.input("up");
    c.expect_close(ops::swiglu(gate, up), "y", usual(c, "y"));
    const auto [grad_gate, grad_up] = ops::swiglu_backward(c.input("grad_y"), gate, up);
    c.expect_close(grad_gate, "grad_gate", usual(c, "grad_gate"));
    c.expect_close(grad_up, "grad_up", usual(c, "grad_up"));
  }
}

INSTANTIATE_TEST_SUITE_P(torch, TorchElementwise, ::testing::Combine(::testing::Values("silu", "swiglu"), kDtypes),
                         param_name);

// --- embedding, cross-entropy -----------------------------------------------

// The lookup copies rows: exact. The backward sums each row's upstream
// gradients (one row of 40 tokens, one of 43): in f32 the order differs
// (f32 tolerance). In bf16 PyTorch's dense backward may round a row's running
// sum to bf16 more than once (its kernel for short id lists adds batch by
// batch into the bf16 gradient), a few bf16 ulps on the long rows against
// titan's one rounding of an f32 sum: tolerance_for(bf16), 2% of the scale and
// 2% relative, while a misrouted token moves a row by a whole upstream row.
TEST_P(TorchEmbedding, ForwardAndBackwardMatchTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  const Tensor weight = c.input("weight"), ids = c.input("ids");
  c.expect_close(ops::embedding(weight, ids), "y", {0.0, 0.0});
  const Tensor grad = ops::embedding_backward(c.input("grad_y"), ids, weight.size(0), c.dtype());
  c.expect_close(grad, "grad_weight",
                 c.dtype() == DType::f32 ? f32_tolerance(c, "grad_weight")
                                         : tolerance_for(DType::bf16, c.expected("grad_weight")));
}

INSTANTIATE_TEST_SUITE_P(torch, TorchEmbedding, ::testing::Combine(::testing::Values("embedding"), kDtypes),
                         param_name);

// PyTorch: F.cross_entropy over the logits upcast to f32 (ignore_index -100,
// mean or sum), its backward with an upstream gradient of 0.7 rounded once to
// the logits' dtype, and logsumexp. Loss and lse are f32 on both sides from
// the same inputs; they differ by a few ulp of their size (~8, or ~900 for a
// sum): 1e-5 relative. The gradient softmax(z) - onehot differs by exp's few
// ulp: usual tolerance. Ignored rows must get exactly zero (inside atol).
TEST_P(TorchCrossEntropy, ForwardAndBackwardMatchTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  ops::CrossEntropyOptions options;
  options.ignore_index = c.meta_int("ignore_index");
  options.mean = c.meta_int("mean") != 0;
  const Tensor logits = c.input("logits"), targets = c.input("targets");
  const ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets, options);
  EXPECT_EQ(out.counted_tokens, c.meta_int("counted_tokens"));
  c.expect_close(out.loss, "loss", {1e-6, 1e-5});
  c.expect_close(out.lse, "lse", {1e-6, 1e-5});
  const Tensor grad =
      ops::cross_entropy_backward(c.input("grad_loss"), logits, targets, out.lse, out.counted_tokens, options);
  c.expect_close(grad, "grad_logits", usual(c, "grad_logits"));
}

INSTANTIATE_TEST_SUITE_P(torch, TorchCrossEntropy,
                         ::testing::Combine(::testing::Values("cross_entropy_mean", "cross_entropy_sum"), kDtypes),
                         param_name);

// --- attention -------------------------------------------------------------

// PyTorch: scaled_dot_product_attention, causal, with GQA (metadata "impl"
// says whether through enable_gqa or repeated kv heads), on [B, H, S, D]
// transposes of titan's [B, S, H, D]; lse in f32 from the same inputs.
// titan's backward takes its own forward's out and lse.
//  - f32: PyTorch picks the memory-efficient kernel or the math path; the
//    former multiplies f32 on tensor cores as three TF32 products, each
//    within ~2^-22 relative, so besides the order of the sums the scores
//    differ by ~1e-6 of their size: 1e-4 of the scale and 1e-3 relative,
//    where one key wrongly masked or taken from the wrong kv head moves a
//    row by ~1e-2 of the scale or more.
//  - bf16: PyTorch's flash kernel rounds P and dS to bf16 for its
//    tensor-core products; titan's scalar kernels keep them f32 and its
//    tensor-core ones round P at their own points. Such roundings are 2^-9 of
//    the terms summed and mostly average out; then both round the result:
//    1e-2 of the scale and 1e-2 relative.
//  - lse is f32 on both sides, the same math: f32 tolerance.
TEST_P(TorchAttention, ForwardAndBackwardMatchTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  SCOPED_TRACE("PyTorch attention: " + c.meta("impl"));
  const Tensor q = c.input("q"), k = c.input("k"), v = c.input("v");
  const ops::AttentionMask mask{c.meta_int("causal") != 0, 0, Tensor()};
  const auto scale = static_cast<float>(c.meta_double("scale"));
  const auto tolerance = [&](const std::string& name) -> Tolerance {
    const double s = scale_of(c.expected(name));
    return c.dtype() == DType::f32 ? Tolerance{1e-4 * s, 1e-3} : Tolerance{1e-2 * s, 1e-2};
  };
  const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, scale);
  c.expect_close(out.out, "out", tolerance("out"));
  c.expect_close(out.lse, "lse", f32_tolerance(c, "lse"));
  const ops::AttentionGrads grads =
      ops::flash_attention_backward(c.input("grad_out"), q, k, v, out.out, out.lse, mask, scale);
  c.expect_close(grads.grad_q, "grad_q", tolerance("grad_q"));
  c.expect_close(grads.grad_k, "grad_k", tolerance("grad_k"));
  c.expect_close(grads.grad_v, "grad_v", tolerance("grad_v"));
}

INSTANTIATE_TEST_SUITE_P(
    torch, TorchAttention,
    ::testing::Combine(::testing::Values("attention_gqa_d64", "attention_gqa_d128", "attention_mha_d32"), kDtypes),
    param_name);

// --- RoPE --------------------------------------------------------------------

// PyTorch: Hugging Face's half-pairing rotation x * cos + rotate_half(x) * sin
// in f32, with cos and sin of angles computed in f64 and rounded to f32, as
// titan's table is; the backward (autograd) against titan's inverse rotation.
// The tables then agree, and each output is two products and a sum, which
// either side may fuse: within ~2 ulp of max |x|, so 1e-6 of the scale (f32).
// One case leaves the positions implicit (0..S-1), the other passes packed
// ones in the thousands with theta 500000.
TEST_P(TorchRope, ForwardAndBackwardMatchTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  const Tensor x = c.input("x");
  const ops::RopeTable table =
      ops::rope_table(x.size(-1), c.meta_int("max_positions"), c.meta_double("theta"), {}, Device::cuda());
  const Tensor positions = c.has("positions") ? c.input("positions") : Tensor();
  const auto tolerance = [&](const std::string& name) -> Tolerance {
    const double s = scale_of(c.expected(name));
    return c.dtype() == DType::f32 ? Tolerance{1e-6 * s, 1e-6} : rounded_once(c, name);
  };
  c.expect_close(ops::rope(x, table, positions, ops::RopeStyle::half), "y", tolerance("y"));
  c.expect_close(ops::rope(c.input("grad_y"), table, positions, ops::RopeStyle::half, /*inverse=*/true), "grad_x",
                 tolerance("grad_x"));
}

INSTANTIATE_TEST_SUITE_P(torch, TorchRope,
                         ::testing::Combine(::testing::Values("rope_half_d64", "rope_half_d128_packed"), kDtypes),
                         param_name);

// --- AdamW -------------------------------------------------------------------

// torch.optim.AdamW (fused on CUDA) for 3 steps over three tensors whose
// gradients are ~1, ~1e-3 and ~1e-6 (there eps = 1e-8 matters); moments in
// the parameters' dtype, as PyTorch keeps them. Both apply the same f32
// formulas, with bias corrections derived once per step, and differ by how
// they fuse multiply-adds: a few ulp per step.
//  - f32: moments 1e-5 relative (and 1e-6 of their scale where terms of
//    either sign cancel); parameters 2e-6 relative, up to ~30 ulp, plus 1e-7
//    absolute near zero, where only the update's ~1e-6 relative error
//    (~1e-8) shows. Missing weight decay moves a parameter by 3e-3 relative,
//    a wrong beta or bias correction by percents of the ~1e-2 updates.
//  - bf16: a few-ulp f32 difference can round a parameter or a moment to the
//    neighbouring bf16 value (at most 2^-7 relative: rtol 1e-2), and a
//    moment one ulp off changes later updates by up to 2^-8 of lr: atol
//    4 * 2^-8 * lr * steps for parameters, 2^-7 of the scale for moments
//    (a moment near zero can carry an earlier step's one-ulp difference).
TEST_P(TorchAdamW, StepsMatchTorch) {
  TITAN_OPEN_TORCH_CASE(c, std::get<0>(GetParam()), std::get<1>(GetParam()));
  const int64_t count = c.meta_int("count"), steps = c.meta_int("steps");
  ops::AdamWHyper hyper;
  hyper.lr = static_cast<float>(c.meta_double("lr"));
  hyper.beta1 = static_cast<float>(c.meta_double("beta1"));
  hyper.beta2 = static_cast<float>(c.meta_double("beta2"));
  hyper.eps = static_cast<float>(c.meta_double("eps"));
  hyper.weight_decay = static_cast<float>(c.meta_double("weight_decay"));
  SCOPED_TRACE("PyTorch AdamW: " + c.meta("impl"));
  std::vector<Tensor> params, exp_avg, exp_avg_sq;
  for (int64_t i = 0; i < count; ++i) {
    params.push_back(c.input("param" + std::to_string(i)));
    exp_avg.push_back(Tensor::zeros(params.back().shape(), c.dtype(), Device::cuda()));
    exp_avg_sq.push_back(Tensor::zeros(params.back().shape(), c.dtype(), Device::cuda()));
  }
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<Tensor> grads;
    for (int64_t i = 0; i < count; ++i) {
      grads.push_back(c.input("grad" + std::to_string(i) + "_step" + std::to_string(step)));
    }
    hyper.step = step + 1;
    ops::adamw_step(params, grads, exp_avg, exp_avg_sq, hyper);
  }
  const bool f32 = c.dtype() == DType::f32;
  for (int64_t i = 0; i < count; ++i) {
    const std::string n = std::to_string(i);
    SCOPED_TRACE("tensor " + n);
    const double param_atol = f32 ? 1e-7 : 4.0 * std::ldexp(1.0, -8) * hyper.lr * static_cast<double>(steps);
    c.expect_close(params[i], "final" + n, {param_atol, f32 ? 2e-6 : 1e-2});
    for (const auto& [moment, name] : {std::pair{&exp_avg, "exp_avg"}, std::pair{&exp_avg_sq, "exp_avg_sq"}}) {
      const double s = scale_of(c.expected(name + n));
      c.expect_close((*moment)[i], name + n, f32 ? Tolerance{1e-6 * s, 1e-5} : Tolerance{std::ldexp(s, -7), 1e-2});
    }
  }
}

INSTANTIATE_TEST_SUITE_P(torch, TorchAdamW, ::testing::Combine(::testing::Values("adamw"), kDtypes), param_name);

}  // namespace torch_cuda_test
}  // namespace titan::testing
