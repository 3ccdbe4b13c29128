// NaN and Inf through every op, against the PyTorch reference
// (tests/reference/nonfinite_cases.py), for each CPU kernel set: a result is
// non-finite exactly where PyTorch's is, and equal to it (within the dtype's
// tolerance) elsewhere. A NaN weight must never give a finite loss or the
// clean model's text: a kernel that drops a NaN (a max that skips it, a row
// taken as fully masked, a clamp, a sort that never ranks it) fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/reference.h"
#include "titan/ops/adamw.h"
#include "titan/ops/attention.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/embedding.h"
#include "titan/ops/gemm.h"
#include "titan/ops/grad_clip.h"
#include "titan/ops/grouped_gemm.h"
#include "titan/ops/moe_routing.h"
#include "titan/ops/reduction.h"
#include "titan/ops/rms_norm.h"
#include "titan/ops/rope.h"
#include "titan/ops/softmax.h"

namespace titan {
namespace nonfinite_test {

using testing::ReferenceCase;

// Non-finite exactly where `expected` is (NaN and +-Inf not told apart), and
// within the dtype's tolerance of it everywhere else.
::testing::AssertionResult same_nonfinite_places(const Tensor& actual, const Tensor& expected, DType dtype) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " vs "
                                         << shape_str(expected.shape());
  }
  const std::vector<float> a = actual.to(DType::f32).to_floats(), e = expected.to(DType::f32).to_floats();
  std::vector<float> finite_a, finite_e;
  std::string misplaced;
  int64_t wrong = 0, nonfinite = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    nonfinite += std::isfinite(e[i]) ? 0 : 1;
    if (std::isfinite(a[i]) != std::isfinite(e[i])) {
      if (++wrong <= 5) misplaced += fmt::format(" [{}] {} (reference {})", i, a[i], e[i]);
    } else if (std::isfinite(e[i])) {
      finite_a.push_back(a[i]);
      finite_e.push_back(e[i]);
    }
  }
  if (wrong > 0) {
    return ::testing::AssertionFailure() << wrong << " of " << a.size() << " elements finite where the reference's "
                                         << "are not, or the reverse (the reference has " << nonfinite
                                         << " non-finite):" << misplaced;
  }
  if (finite_e.empty()) return ::testing::AssertionSuccess();
  const Shape shape{static_cast<int64_t>(finite_e.size())};
  const Tensor expected_finite = Tensor::from_floats(finite_e, shape);
  const auto tol = testing::tolerance_for(dtype, expected_finite);
  return testing::all_close(Tensor::from_floats(finite_a, shape), expected_finite, tol.atol, tol.rtol);
}

#define EXPECT_NONFINITE_LIKE(actual, ref, name, dtype) \
  EXPECT_TRUE(same_nonfinite_places(actual, (ref).get(name), dtype)) << name

class NonFiniteTest : public ::testing::TestWithParam<DType> {};

TEST_P(NonFiniteTest, Gemm) {
  const DType dtype = GetParam();
  ReferenceCase ref("nonfinite_gemm");
  EXPECT_NONFINITE_LIKE(ops::matmul(ref.get("a", dtype), ref.get("b", dtype)), ref, "c", dtype);
}

TEST_P(NonFiniteTest, SiluSwigluGegluSoftCap) {
  const DType dtype = GetParam();
  {
    ReferenceCase ref("nonfinite_silu");
    const Tensor x = ref.get("x", dtype);
    EXPECT_NONFINITE_LIKE(ops::silu(x), ref, "y", dtype);
    EXPECT_NONFINITE_LIKE(ops::silu_backward(ref.get("grad_y", dtype), x), ref, "grad_x", dtype);
  }
  for (const char* name : {"swiglu", "geglu"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(std::string("nonfinite_") + name);
    const Tensor gate = ref.get("gate", dtype), up = ref.get("up", dtype), grad_y = ref.get("grad_y", dtype);
    const bool swiglu = std::string(name) == "swiglu";
    EXPECT_NONFINITE_LIKE(swiglu ? ops::swiglu(gate, up) : ops::geglu(gate, up), ref, "y", dtype);
    auto [grad_gate, grad_up] = swiglu ? ops::swiglu_backward(grad_y, gate, up) : ops::geglu_backward(grad_y, gate, up);
    EXPECT_NONFINITE_LIKE(grad_gate, ref, "grad_gate", dtype);
    EXPECT_NONFINITE_LIKE(grad_up, ref, "grad_up", dtype);
  }
  {
    ReferenceCase ref("nonfinite_soft_cap");
    const float cap = static_cast<float>(ref.meta_double("cap"));
    const Tensor y = ops::soft_cap(ref.get("x", dtype), cap);
    EXPECT_NONFINITE_LIKE(y, ref, "y", dtype);
    EXPECT_NONFINITE_LIKE(ops::soft_cap_backward(ref.get("grad_y", dtype), y, cap), ref, "grad_x", dtype);
  }
}

TEST_P(NonFiniteTest, SoftmaxAndRmsNorm) {
  const DType dtype = GetParam();
  {
    ReferenceCase ref("nonfinite_softmax");
    const Tensor y = ops::softmax(ref.get("x", dtype));
    EXPECT_NONFINITE_LIKE(y, ref, "y", dtype);
    EXPECT_NONFINITE_LIKE(ops::softmax_backward(ref.get("grad_y", dtype), ref.get("y", dtype)), ref, "grad_x", dtype);
  }
  ReferenceCase ref("nonfinite_rms_norm");
  const Tensor x = ref.get("x", dtype), w = ref.get("weight", dtype);
  const ops::RmsNormOutput out = ops::rms_norm(x, w, static_cast<float>(ref.meta_double("eps")));
  EXPECT_NONFINITE_LIKE(out.y, ref, "y", dtype);
  const ops::RmsNormGrads grads = ops::rms_norm_backward(ref.get("grad_y", dtype), x, w, out.rstd);
  EXPECT_NONFINITE_LIKE(grads.grad_x, ref, "grad_x", dtype);
  EXPECT_NONFINITE_LIKE(grads.grad_weight, ref, "grad_weight", dtype);
}

TEST_P(NonFiniteTest, EmbeddingAndRope) {
  const DType dtype = GetParam();
  {
    ReferenceCase ref("nonfinite_embedding");
    const Tensor w = ref.get("weight", dtype), ids = ref.get("ids");
    EXPECT_NONFINITE_LIKE(ops::embedding(w, ids), ref, "y", dtype);
    EXPECT_NONFINITE_LIKE(ops::embedding_backward(ref.get("grad_y", dtype), ids, w.size(0), DType::f32), ref,
                          "grad_weight", dtype);
  }
  ReferenceCase ref("nonfinite_rope");
  const ops::RopeTable table = ops::rope_table(16, ref.meta_int("max_positions"), ref.meta_double("theta"), {});
  EXPECT_NONFINITE_LIKE(ops::rope(ref.get("x", dtype), table, Tensor(), ops::RopeStyle::half), ref, "y", dtype);
}

TEST_P(NonFiniteTest, FlashAttentionForwardAndBackward) {
  const DType dtype = GetParam();
  for (const char* name : {"causal", "window_documents"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(std::string("nonfinite_attention_") + name);
    const Tensor q = ref.get("q", dtype), k = ref.get("k", dtype), v = ref.get("v", dtype);
    ops::AttentionMask mask{true, ref.meta_int("window"), {}};
    if (ref.has("document_ids")) mask.document_ids = ref.get("document_ids");
    const float scale = static_cast<float>(ref.meta_double("scale"));
    const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, scale);
    EXPECT_NONFINITE_LIKE(out.out, ref, "y", dtype);
    const ops::AttentionGrads grads =
        ops::flash_attention_backward(ref.get("grad_y", dtype), q, k, v, out.out, out.lse, mask, scale);
    EXPECT_NONFINITE_LIKE(grads.grad_q, ref, "grad_q", dtype);
    EXPECT_NONFINITE_LIKE(grads.grad_k, ref, "grad_k", dtype);
    EXPECT_NONFINITE_LIKE(grads.grad_v, ref, "grad_v", dtype);
  }
}

TEST_P(NonFiniteTest, CrossEntropyPlainAndFused) {
  const DType dtype = GetParam();
  for (const char* name : {"cross_entropy", "cross_entropy_ignored"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(std::string("nonfinite_") + name);
    const Tensor logits = ref.get("logits", dtype), targets = ref.get("targets");
    const ops::CrossEntropyOptions options;
    const ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets, options);
    EXPECT_NONFINITE_LIKE(out.loss, ref, "loss", DType::f32);
    EXPECT_NONFINITE_LIKE(
        ops::cross_entropy_backward(Tensor::full({}, 1.0), logits, targets, out.lse, out.counted_tokens, options), ref,
        "grad_logits", dtype);
  }
  ReferenceCase ref("nonfinite_fused_cross_entropy");
  const Tensor hidden = ref.get("hidden", dtype), weight = ref.get("weight", dtype), targets = ref.get("targets");
  for (int64_t vocab_chunk : {0, 16}) {
    SCOPED_TRACE("vocab_chunk " + std::to_string(vocab_chunk));
    ops::FusedCrossEntropyOptions options;
    options.token_chunk = 7;
    options.vocab_chunk = vocab_chunk;
    const ops::FusedCrossEntropyOutput out = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
    EXPECT_NONFINITE_LIKE(out.loss, ref, "loss", DType::f32);
    EXPECT_NONFINITE_LIKE(out.grad_hidden, ref, "grad_hidden", dtype);
    EXPECT_NONFINITE_LIKE(out.grad_weight, ref, "grad_weight", dtype);
  }
}

TEST_P(NonFiniteTest, GroupedGemm) {
  const DType dtype = GetParam();
  ReferenceCase ref("nonfinite_grouped_gemm");
  const Tensor x = ref.get("x", dtype), w = ref.get("w", dtype), counts = ref.get("counts"),
               grad_y = ref.get("grad_y", dtype);
  EXPECT_NONFINITE_LIKE(ops::grouped_gemm(x, w, counts), ref, "y", dtype);
  EXPECT_NONFINITE_LIKE(ops::grouped_gemm_input_grad(grad_y, w, counts), ref, "grad_x", dtype);
  EXPECT_NONFINITE_LIKE(ops::grouped_gemm_weight_grad(grad_y, x, counts), ref, "grad_w", dtype);
}

INSTANTIATE_TEST_SUITE_P(DTypes, NonFiniteTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(NonFinite, AdamWTurnsANonFiniteGradientIntoANonFiniteParameter) {
  ReferenceCase ref("nonfinite_adamw");
  ops::AdamWHyper hyper;
  hyper.lr = static_cast<float>(ref.meta_double("lr"));
  hyper.beta1 = static_cast<float>(ref.meta_double("beta1"));
  hyper.beta2 = static_cast<float>(ref.meta_double("beta2"));
  hyper.eps = static_cast<float>(ref.meta_double("eps"));
  hyper.weight_decay = static_cast<float>(ref.meta_double("weight_decay"));
  const Tensor param = ref.get("param"), grad = ref.get("grad");
  const Tensor exp_avg = Tensor::zeros(param.shape()), exp_avg_sq = Tensor::zeros(param.shape());
  ops::adamw_step(std::vector<Tensor>{param}, std::vector<Tensor>{grad}, std::vector<Tensor>{exp_avg},
                  std::vector<Tensor>{exp_avg_sq}, hyper);
  EXPECT_NONFINITE_LIKE(param, ref, "final", DType::f32);
  EXPECT_NONFINITE_LIKE(exp_avg, ref, "exp_avg", DType::f32);
  EXPECT_NONFINITE_LIKE(exp_avg_sq, ref, "exp_avg_sq", DType::f32);
}

TEST(NonFinite, ReductionsNormsAndClipping) {
  ReferenceCase ref("nonfinite_reductions");
  const Tensor x = ref.get("x"), y = ref.get("y");
  EXPECT_NONFINITE_LIKE(ops::sum(x), ref, "sum_x", DType::f32);
  EXPECT_NONFINITE_LIKE(ops::max(x), ref, "max_x", DType::f32);
  EXPECT_NONFINITE_LIKE(ops::sum_squares(x), ref, "sum_squares_x", DType::f32);
  EXPECT_NONFINITE_LIKE(ops::sum(y), ref, "sum_y", DType::f32);
  EXPECT_NONFINITE_LIKE(ops::max(y), ref, "max_y", DType::f32);
  EXPECT_NONFINITE_LIKE(ops::global_l2_norm(std::vector<Tensor>{x, y}), ref, "l2_norm", DType::f32);
  EXPECT_NONFINITE_LIKE(ops::max(x.to(DType::bf16)), ref, "max_x", DType::bf16);

  // Clipping: the norm is NaN as in torch. Its factor is where titan differs
  // on purpose: torch's clamp makes every gradient NaN (the reference's
  // clipped0/1); titan leaves them as they are, so that the trainer's check can
  // name the parameter whose gradient is not finite: exactly the reference's
  // input gradients come back.
  ReferenceCase clip("nonfinite_clip");
  const std::vector<Tensor> grads{clip.get("grad0"), clip.get("grad1")};
  const Tensor sum_squares = ops::add(ops::sum_squares(grads[0]), ops::sum_squares(grads[1])).reshape({1});
  const Tensor scalars = ops::clip_scalars(sum_squares, clip.meta_double("max_norm"));
  EXPECT_NONFINITE_LIKE(scalars.narrow(0, 0, 1).reshape({}), clip, "norm", DType::f32);
  EXPECT_EQ(scalars.to_floats().at(1), 1.0f);
  ops::scale_all_by_(grads, scalars, 1);
  EXPECT_NONFINITE_LIKE(grads[0], clip, "grad0", DType::f32);
  EXPECT_NONFINITE_LIKE(grads[1], clip, "grad1", DType::f32);
  const std::vector<Tensor> again{clip.get("grad0"), clip.get("grad1")};
  EXPECT_FALSE(std::isfinite(ops::clip_grad_norm_(again, clip.meta_double("max_norm"))));
  EXPECT_NONFINITE_LIKE(again[1], clip, "grad1", DType::f32);
}

TEST(NonFinite, RouterTopKRanksNanFirstAsPyTorchDoes) {
  ReferenceCase ref("nonfinite_topk");
  const ops::TopK top = ops::topk(ref.get("scores"), ref.get("values").size(1));
  EXPECT_NONFINITE_LIKE(top.values, ref, "values", DType::f32);
  EXPECT_EQ(top.indices.to_ints(), ref.get("indices").to_ints());
  EXPECT_NONFINITE_LIKE(ops::normalize_rows(top.values), ref, "normalized", DType::f32);
  ReferenceCase sigmoid("nonfinite_sigmoid");
  EXPECT_NONFINITE_LIKE(ops::sigmoid(sigmoid.get("x")), sigmoid, "y", DType::f32);
}

}  // namespace nonfinite_test
}  // namespace titan
