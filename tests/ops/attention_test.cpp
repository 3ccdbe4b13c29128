// Flash attention (forward and backward) against the float64 PyTorch reference
// in f32 and bf16, against the naive materialised-scores path through autograd
// for every mask kind, plus its memory bound, thread-count independence and
// argument errors.
//
// CUDA flash attention (forward and backward) against the CPU kernel on the
// same inputs, for every mask kind, GQA, decoding, ragged lengths and the head
// dims the kernels are compiled for; plus run-to-run determinism of the
// backward and the head-dim limit. bf16 with D = 64 or 128 runs the
// tensor-core kernels (attention_tensor_core_*.cu), everything else the
// scalar ones.
//
// Tolerances. Both backends compute in f32 from the same inputs; they differ
// in summation order (oneDNN's blocked GEMMs over 128-row tiles against
// sequential FMAs over 64-row tiles) and in exp (a vectorised polynomial
// against expf, each within a few ulp). That is rounding noise of order
// sqrt(K) * 2^-24 of the terms summed, far below 1e-5 of the output's scale:
//  - f32 outputs use tolerance_for(f32) (2e-5 of the scale, 1e-4 relative),
//    where a single wrongly masked key in a row of a few hundred moves the
//    output by ~1e-3 of its scale.
//  - bf16 outputs of the scalar kernels are those f32 values rounded once.
//    Two f32 values a hair apart can round to neighbouring bf16 values, 1 ulp
//    = at most 2^-7 relative apart: rtol 1e-2 covers that, atol 1e-4 of the
//    scale covers the f32 noise near zero where ulps are tiny.
//  - The tensor-core kernels also round their product operands to bf16, as
//    FlashAttention does: P before O += P V and dV += P^T dO, dS before
//    dK += dS^T Q and dQ += dS K (and dS is formed from the rounded P). Each
//    rounding moves an element by at most 2^-8 relative, independently per
//    key, so an output element moves by about 2^-8 / sqrt(3) * |V| *
//    sqrt(sum_j p_j^2): largest for rows that spread over few keys, where it
//    approaches 2^-8 of the scale; an element near zero gets none of the
//    relative slack. Emulated against float64 on these shapes (all masks,
//    D = 64 and 128, sharp and flat softmaxes) the worst element needed an
//    atol of 2.7e-3 of the scale next to rtol 1e-2; atol 6e-3 leaves twice
//    that, still well under the ~1e-2 of the scale that one wrongly masked
//    key among a few dozen would cost.
//  - lse is f32 in both dtypes (the row sums use the unrounded P): f32
//    tolerance, and -inf in the same places.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/allocator.h"
#include "titan/nn/functional.h"
#include "titan/ops/attention.h"

namespace titan {
namespace attention_test {

using testing::ReferenceCase;

void expect_matches(const Tensor& actual, const Tensor& expected, DType dtype, const char* what) {
  SCOPED_TRACE(what);
  const auto tol = testing::tolerance_for(dtype, expected);
  EXPECT_EQ(actual.dtype(), dtype);
  EXPECT_TRUE(testing::all_close(actual, expected, tol.atol, tol.rtol));
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.to_floats(), b.to_floats());
}

// ---- against the PyTorch reference ----

class AttentionReferenceTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(AttentionReferenceTest, ForwardAndBackward) {
  const auto& [name, dtype] = GetParam();
  ReferenceCase ref("attention_" + name);
  const Tensor q = ref.get("q", dtype), k = ref.get("k", dtype), v = ref.get("v", dtype);
  const Tensor grad_y = ref.get("grad_y", dtype);
  const float scale = static_cast<float>(ref.meta_double("scale"));
  ops::AttentionMask mask{ref.meta_int("causal") != 0, ref.meta_int("window"), {}};
  if (ref.has("document_ids")) mask.document_ids = ref.get("document_ids");
  mask.logit_softcap = static_cast<float>(ref.meta_double("softcap"));

  const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, scale);
  expect_matches(out.out, ref.get("y"), dtype, "y");
  if (mask.logit_softcap > 0.0f) {
    // The cases are drawn so that the cap matters: without it the output must miss the reference.
    ops::AttentionMask uncapped = mask;
    uncapped.logit_softcap = 0.0f;
    const Tensor plain = ops::flash_attention(q, k, v, uncapped, scale).out;
    const auto tol = testing::tolerance_for(dtype, ref.get("y"));
    EXPECT_FALSE(testing::all_close(plain, ref.get("y"), tol.atol, tol.rtol)) << "the soft cap changes nothing here";
  }
  ASSERT_EQ(out.lse.shape(), (Shape{q.size(0), q.size(2), q.size(1)}));
  const ops::AttentionGrads grads = ops::flash_attention_backward(grad_y, q, k, v, out.out, out.lse, mask, scale);
  expect_matches(grads.grad_q, ref.get("grad_q"), dtype, "grad_q");
  expect_matches(grads.grad_k, ref.get("grad_k"), dtype, "grad_k");
  expect_matches(grads.grad_v, ref.get("grad_v"), dtype, "grad_v");

  if (mask.document_ids.defined()) {  // i32 ids: the same mask, so the same bits
    ops::AttentionMask mask32 = mask;
    mask32.document_ids = mask.document_ids.to(DType::i32);
    const ops::AttentionOutput out32 = ops::flash_attention(q, k, v, mask32, scale);
    expect_bitwise_equal(out32.out, out.out, "y with i32 document ids");
    expect_bitwise_equal(out32.lse, out.lse, "lse with i32 document ids");
    const ops::AttentionGrads grads32 = ops::flash_attention_backward(grad_y, q, k, v, out.out, out.lse, mask32, scale);
    expect_bitwise_equal(grads32.grad_q, grads.grad_q, "grad_q with i32 document ids");
    expect_bitwise_equal(grads32.grad_k, grads.grad_k, "grad_k with i32 document ids");
    expect_bitwise_equal(grads32.grad_v, grads.grad_v, "grad_v with i32 document ids");
  }
}

// Every suite here is instantiated as "attention", which puts the word in each
// CTest name: `ctest -R attention` runs them all.
INSTANTIATE_TEST_SUITE_P(
    attention, AttentionReferenceTest,
    ::testing::Combine(::testing::Values("causal", "full", "window", "documents", "documents_window", "gqa", "head64",
                                         "head128", "decode", "long", "tiled_window_documents", "softcap50", "softcap5",
                                         "softcap5_full"),
                       ::testing::Values(DType::f32, DType::bf16)),
    [](const auto& info) { return std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param)); });

// ---- flash against naive through autograd ----

struct MaskCase {
  const char* name;
  int64_t batch, q_len, k_len, heads, kv_heads, dim;
  bool causal;
  int64_t window;
  // 0: no document ids; 1: packed (non-decreasing) ids; 2: ids that jump back
  // and forth, which the kernel must handle correctly if not quickly.
  int documents;
  float softcap = 0.0f;  // the mask's logit_softcap
};

Tensor document_ids(int64_t batch, int64_t len, int kind) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < len; ++j) {
      // Packed: documents of 54 tokens, starting at a different offset per batch row.
      const int64_t packed = (j + 13 * b) / 54;
      ids[static_cast<size_t>(b * len + j)] = kind == 1 ? packed : (j * 7 + b) % 3;
    }
  }
  return Tensor::from_vector(ids, {batch, len});
}

struct AttentionRun {
  Tensor out, grad_q, grad_k, grad_v;
};

AttentionRun run_through_autograd(const MaskCase& c, const ops::AttentionMask& mask, F::AttentionImpl impl) {
  Tensor q = testing::random_leaf({c.batch, c.q_len, c.heads, c.dim}, 1);
  Tensor k = testing::random_leaf({c.batch, c.k_len, c.kv_heads, c.dim}, 2);
  Tensor v = testing::random_leaf({c.batch, c.k_len, c.kv_heads, c.dim}, 3);
  const Tensor upstream = testing::random_leaf({c.batch, c.q_len, c.heads, c.dim}, 4).detach();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  const Tensor out = F::scaled_dot_product_attention(q, k, v, mask, scale, impl);
  autograd::backward({F::sum(F::mul(out, upstream))});
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// Output and q/k/v gradients of the flash path against the naive one.
void expect_flash_matches_naive(const MaskCase& c, const ops::AttentionMask& mask) {
  const AttentionRun flash = run_through_autograd(c, mask, F::AttentionImpl::flash);
  const AttentionRun naive = run_through_autograd(c, mask, F::AttentionImpl::naive);
  expect_matches(flash.out, naive.out, DType::f32, "out");
  expect_matches(flash.grad_q, naive.grad_q, DType::f32, "grad_q");
  expect_matches(flash.grad_k, naive.grad_k, DType::f32, "grad_k");
  expect_matches(flash.grad_v, naive.grad_v, DType::f32, "grad_v");
}

class FlashVsNaiveTest : public ::testing::TestWithParam<MaskCase> {};

TEST_P(FlashVsNaiveTest, OutputAndGradientsAgree) {
  const MaskCase& c = GetParam();
  ops::AttentionMask mask{c.causal, c.window, {}};
  if (c.documents != 0) mask.document_ids = document_ids(c.batch, c.k_len, c.documents);
  mask.logit_softcap = c.softcap;
  expect_flash_matches_naive(c, mask);
}

void PrintTo(const MaskCase& c, std::ostream* out) { *out << c.name; }

// Lengths are not multiples of the kernel's 128-row tiles and windows are
// shorter than a tile, so wholly visible, partial and skipped tiles all occur
// (causal: S >= 256; window: a query block starting past window + 128;
// documents: 54-token documents, so most query and key blocks share none).
INSTANTIATE_TEST_SUITE_P(attention, FlashVsNaiveTest,
                         ::testing::Values(MaskCase{"causal", 2, 300, 300, 2, 2, 16, true, 0, 0},
                                           MaskCase{"none", 2, 150, 150, 2, 2, 16, false, 0, 0},
                                           MaskCase{"window", 1, 400, 400, 2, 2, 16, true, 40, 0},
                                           MaskCase{"window_not_causal", 1, 400, 400, 2, 2, 16, false, 40, 0},
                                           MaskCase{"documents", 2, 420, 420, 2, 1, 16, true, 0, 1},
                                           MaskCase{"documents_not_causal", 2, 420, 420, 2, 1, 16, false, 0, 1},
                                           MaskCase{"documents_window", 2, 420, 420, 2, 1, 16, true, 30, 1},
                                           MaskCase{"documents_unsorted", 1, 300, 300, 2, 2, 16, true, 0, 2},
                                           MaskCase{"gqa", 1, 260, 260, 6, 2, 32, true, 0, 0},
                                           MaskCase{"gqa_one_kv_head", 1, 260, 260, 4, 1, 32, true, 0, 0},
                                           MaskCase{"decode", 2, 5, 300, 4, 2, 16, true, 0, 0},
                                           MaskCase{"shorter_queries", 1, 200, 460, 2, 1, 16, true, 150, 1},
                                           // Unit-variance scores against caps of 1 to 3: tanh bends them all.
                                           MaskCase{"softcap_documents_window", 2, 420, 420, 4, 2, 16, true, 30, 1,
                                                    2.0f},
                                           MaskCase{"softcap_gqa", 1, 260, 260, 6, 2, 32, true, 0, 0, 3.0f},
                                           MaskCase{"softcap_not_causal", 2, 150, 150, 2, 2, 16, false, 0, 0, 1.0f},
                                           MaskCase{"softcap_decode", 2, 5, 300, 4, 2, 16, true, 0, 0, 1.5f}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- queries and keys placed by the mask (context parallelism's chunk pairs) ----

struct PlacedCase {
  const char* name;
  int64_t q_len, k_len, query_start, key_start;
  bool causal;
  int64_t window;
  bool documents;  // ids (7 p + 1) % 3 of absolute position p: every key range of 3 holds each id
};

Tensor placed_document_ids(int64_t len, int64_t start) {
  std::vector<int64_t> ids(static_cast<size_t>(len));
  for (int64_t j = 0; j < len; ++j) ids[static_cast<size_t>(j)] = ((start + j) * 7 + 1) % 3;
  return Tensor::from_vector(ids, {1, len});
}

class PlacedChunksTest : public ::testing::TestWithParam<PlacedCase> {};

// The naive bias (written from the mask's definition) against the flash
// kernel's block logic, for chunks whose every query sees some key.
TEST_P(PlacedChunksTest, FlashMatchesNaive) {
  const PlacedCase& p = GetParam();
  const MaskCase c{p.name, 1, p.q_len, p.k_len, 4, 2, 16, p.causal, p.window, 0};
  ops::AttentionMask mask{p.causal, p.window, {}};
  mask.query_start = p.query_start;
  mask.key_start = p.key_start;
  if (p.documents) {
    mask.document_ids = placed_document_ids(p.k_len, p.key_start);
    mask.query_document_ids = placed_document_ids(p.q_len, p.query_start);
  }
  expect_flash_matches_naive(c, mask);
}

void PrintTo(const PlacedCase& c, std::ostream* out) { *out << c.name; }

INSTANTIATE_TEST_SUITE_P(attention, PlacedChunksTest,
                         ::testing::Values(PlacedCase{"keys_before", 200, 300, 700, 100, true, 0, false},
                                           PlacedCase{"overlapping", 260, 300, 300, 100, true, 0, false},
                                           PlacedCase{"more_queries_than_keys", 400, 150, 300, 0, true, 0, false},
                                           PlacedCase{"window", 250, 300, 500, 400, true, 70, false},
                                           PlacedCase{"not_causal_after", 150, 200, 0, 500, false, 0, false},
                                           PlacedCase{"documents", 260, 270, 600, 200, true, 0, true},
                                           PlacedCase{"documents_window", 200, 270, 400, 200, true, 150, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Queries wholly before their keys under a causal mask see nothing: zero
// output, lse -inf, zero gradients (what the ring merge relies on).
TEST(PlacedChunks, HiddenChunkGivesZerosAndMinusInfinity) {
  const Tensor q = testing::random_leaf({1, 130, 2, 8}, 1).detach();
  const Tensor k = testing::random_leaf({1, 140, 2, 8}, 2).detach();
  const Tensor v = testing::random_leaf({1, 140, 2, 8}, 3).detach();
  ops::AttentionMask mask{true, 0, {}};
  mask.query_start = 0;
  mask.key_start = 200;
  const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, 0.5f);
  for (float value : out.out.to_floats()) EXPECT_EQ(value, 0.0f);
  for (float value : out.lse.to_floats()) EXPECT_EQ(value, -INFINITY);
  const ops::AttentionGrads grads = ops::flash_attention_backward(q, q, k, v, out.out, out.lse, mask, 0.5f);
  for (const Tensor& grad : {grads.grad_q, grads.grad_k, grads.grad_v}) {
    for (float value : grad.to_floats()) EXPECT_EQ(value, 0.0f);
  }
}

TEST(PlacedChunks, PlacedQueriesWithDocumentsNeedTheirOwnIds) {
  const Tensor q = Tensor::zeros({1, 4, 1, 8}), k = Tensor::zeros({1, 4, 1, 8});
  ops::AttentionMask mask{true, 0, Tensor::from_vector(std::vector<int64_t>{0, 0, 1, 1}, {1, 4})};
  mask.query_start = 8;
  EXPECT_THROW(ops::flash_attention(q, k, k, mask, 1.0f), Error);
  mask.query_document_ids = Tensor::from_vector(std::vector<int64_t>{1, 1, 1}, {1, 3});
  EXPECT_THROW(ops::flash_attention(q, k, k, mask, 1.0f), Error);
}

// The flash path against central differences, independently of any reference.
class FlashGradcheckTest : public ::testing::TestWithParam<std::string> {};

// "softcap" and "softcap_naive" check the soft cap's gradient in the flash
// kernel and in the naive path's soft_cap op.
TEST_P(FlashGradcheckTest, MatchesFiniteDifferences) {
  const std::string& kind = GetParam();
  ops::AttentionMask mask{kind != "none", kind == "window" ? 3 : 0, {}};
  if (kind == "documents") {
    mask.document_ids = Tensor::from_vector<int64_t>({0, 0, 0, 1, 1, 2, 2, 2, 0, 1, 1, 1, 1, 1, 2, 2}, {2, 8});
  }
  if (kind.rfind("softcap", 0) == 0) mask.logit_softcap = 0.7f;
  const F::AttentionImpl impl = kind == "softcap_naive" ? F::AttentionImpl::naive : F::AttentionImpl::flash;
  EXPECT_TRUE(testing::check_gradients(
      [&](const auto& x) { return F::scaled_dot_product_attention(x[0], x[1], x[2], mask, 0.5f, impl); },
      {testing::random_leaf({2, 8, 4, 4}, 1), testing::random_leaf({2, 8, 2, 4}, 2),
       testing::random_leaf({2, 8, 2, 4}, 3)}));
}

INSTANTIATE_TEST_SUITE_P(attention, FlashGradcheckTest,
                         ::testing::Values("causal", "none", "window", "documents", "softcap", "softcap_naive"));

// ---- memory, threads, errors ----

class FlashAttentionTest : public ::testing::TestWithParam<DType> {};

TEST_P(FlashAttentionTest, MemoryStaysFarBelowTheScoreMatrix) {
  const DType dtype = GetParam();
  // B = 1, H = 2, S = 2048, D = 64: one head's scores alone would be S*S*4 =
  // 16 MiB. Beyond its inputs and outputs (out, lse, three gradients) the
  // kernel may hold D_i (like lse: 16 KiB), per-thread tiles (backward: six
  // 128 x D and two 128 x 128 f32 = 320 KiB at D = 64) and, in the
  // fused backward, f32 dQ accumulators that together never exceed an f32
  // copy of q (1 MiB). With two threads that is about 1.7 MiB in f32 or bf16;
  // we allow 2 MiB = S*S*4 / 8.
  const int64_t seq = 2048, heads = 2, dim = 64;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  Allocator& allocator = allocator_for(DeviceType::cpu);
  const Tensor q = testing::random_leaf({1, seq, heads, dim}, 1).detach().to(dtype);
  const Tensor k = testing::random_leaf({1, seq, heads, dim}, 2).detach().to(dtype);
  const Tensor v = testing::random_leaf({1, seq, heads, dim}, 3).detach().to(dtype);
  const Tensor grad_out = testing::random_leaf({1, seq, heads, dim}, 4).detach().to(dtype);
  const int64_t live_before = allocator.stats().live_bytes;
  allocator.reset_peak();
  const ops::AttentionMask mask{true, 0, {}};
  const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, 0.125f);
  const ops::AttentionGrads grads = ops::flash_attention_backward(grad_out, q, k, v, out.out, out.lse, mask, 0.125f);
  const int64_t peak_extra = allocator.stats().peak_bytes - live_before;
  omp_set_num_threads(threads);
  const int64_t outputs = static_cast<int64_t>(out.out.nbytes() + out.lse.nbytes() + grads.grad_q.nbytes() +
                                               grads.grad_k.nbytes() + grads.grad_v.nbytes());
  EXPECT_LT(peak_extra - outputs, seq * seq * 4 / 8) << "peak " << peak_extra << " bytes, outputs " << outputs;
  EXPECT_GE(peak_extra, outputs);  // the statistics do see the outputs
}

// One configuration per backward scheme choice: with B * Hkv = 4 both thread
// counts take the fused single sweep; with B * Hkv = 1 one thread takes it and
// two threads take the two passes, whose dQ must come out bit for bit the same.
TEST_P(FlashAttentionTest, BitwiseSameForOneAndTwoThreads) {
  const DType dtype = GetParam();
  struct Config {
    int64_t batch, seq, heads, kv_heads, dim;
  };
  for (const Config c : {Config{2, 300, 4, 2, 32}, Config{1, 300, 4, 1, 64}}) {
    // Packed documents and a window: every tile kind, several tasks per pass.
    const ops::AttentionMask mask{true, 100, document_ids(c.batch, c.seq, 1)};
    {
      SCOPED_TRACE(::testing::Message() << "batch " << c.batch << " kv_heads " << c.kv_heads);
      const Tensor q = testing::random_leaf({c.batch, c.seq, c.heads, c.dim}, 1).detach().to(dtype);
      const Tensor k = testing::random_leaf({c.batch, c.seq, c.kv_heads, c.dim}, 2).detach().to(dtype);
      const Tensor v = testing::random_leaf({c.batch, c.seq, c.kv_heads, c.dim}, 3).detach().to(dtype);
      const Tensor grad_out = testing::random_leaf({c.batch, c.seq, c.heads, c.dim}, 4).detach().to(dtype);
      const auto run = [&](int threads) {
        omp_set_num_threads(threads);
        const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, 0.2f);
        return std::make_tuple(out, ops::flash_attention_backward(grad_out, q, k, v, out.out, out.lse, mask, 0.2f));
      };
      const int threads = omp_get_max_threads();
      const auto [out1, grads1] = run(1);
      const auto [out2, grads2] = run(2);
      omp_set_num_threads(threads);
      expect_bitwise_equal(out1.out, out2.out, "out");
      expect_bitwise_equal(out1.lse, out2.lse, "lse");
      expect_bitwise_equal(grads1.grad_q, grads2.grad_q, "grad_q");
      expect_bitwise_equal(grads1.grad_k, grads2.grad_k, "grad_k");
      expect_bitwise_equal(grads1.grad_v, grads2.grad_v, "grad_v");
    }
  }
}

void expect_error_naming(const std::function<void()>& call, const std::string& op, const std::string& detail) {
  try {
    call();
    ADD_FAILURE() << "expected an error mentioning " << detail;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(op), std::string::npos) << message;
    EXPECT_NE(message.find(detail), std::string::npos) << message;
  }
}

TEST_P(FlashAttentionTest, BadInputNamesTheOp) {
  const DType dtype = GetParam(), other = dtype == DType::f32 ? DType::bf16 : DType::f32;
  const Tensor q = Tensor::zeros({1, 8, 4, 4}, dtype), k = Tensor::zeros({1, 8, 2, 4}, dtype);
  const ops::AttentionMask causal{true, 0, {}};
  expect_error_naming(
      [&] {
        ops::flash_attention(Tensor::zeros({1, 8, 3, 4}, dtype), k, k, causal, 1.0f);
      },
      "flash_attention", "3 query heads are not a multiple of 2");
  const ops::AttentionMask short_docs{true, 0, Tensor::zeros({1, 7}, DType::i64)};
  expect_error_naming([&] { ops::flash_attention(q, k, k, short_docs, 1.0f); }, "flash_attention",
                      "document_ids [1, 7]");
  const ops::AttentionMask float_docs{true, 0, Tensor::zeros({1, 8})};
  expect_error_naming([&] { ops::flash_attention(q, k, k, float_docs, 1.0f); }, "flash_attention", "document_ids");
  ops::AttentionMask negative_cap{true, 0, {}};
  negative_cap.logit_softcap = -1.0f;
  expect_error_naming([&] { ops::flash_attention(q, k, k, negative_cap, 1.0f); }, "flash_attention", "logit_softcap");
  expect_error_naming(
      [&] {
        ops::flash_attention(Tensor::zeros({1, 9, 4, 4}, dtype), k, k, causal, 1.0f);
      },
      "flash_attention", "9 queries");
  expect_error_naming([&] { ops::flash_attention(q, k.to(other), k, causal, 1.0f); }, "flash_attention",
                      dtype_name(other));
  expect_error_naming(
      [&] {
        const Tensor i32 = Tensor::zeros({1, 8, 2, 4}, DType::i32);
        ops::flash_attention(Tensor::zeros({1, 8, 4, 4}, DType::i32), i32, i32, causal, 1.0f);
      },
      "flash_attention", "i32");
  const ops::AttentionOutput out = ops::flash_attention(q, k, k, causal, 1.0f);
  expect_error_naming([&] { ops::flash_attention_backward(q, q, k, k, out.out, out.lse, short_docs, 1.0f); },
                      "flash_attention_backward", "document_ids");
  expect_error_naming(
      [&] {
        ops::flash_attention_backward(q, q, k, k, out.out, Tensor::zeros({1, 4, 7}), causal, 1.0f);
      },
      "flash_attention_backward", "lse");
}

INSTANTIATE_TEST_SUITE_P(attention, FlashAttentionTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace attention_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace attention_test {

// Whether the CUDA kernels take the tensor-core path (attention_tensor_cores()).
bool tensor_cores(DType dtype, int64_t dim) { return dtype == DType::bf16 && (dim == 64 || dim == 128); }

Tolerance tolerance(DType dtype, int64_t dim, const Tensor& expected) {
  if (dtype == DType::f32) return tolerance_for(DType::f32, expected);
  const double scale = std::max(max_abs(expected), 1e-30);
  return {(tensor_cores(dtype, dim) ? 6e-3 : 1e-4) * scale, 1e-2};
}

void expect_close(const Tensor& cuda_result, const Tensor& cpu_result, DType dtype, int64_t dim, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(cuda_result.device().is_cuda());
  const Tensor actual = on_cpu(cuda_result);
  EXPECT_EQ(actual.dtype(), cpu_result.dtype());
  const Tolerance tol = tolerance(dtype, dim, cpu_result);
  EXPECT_TRUE(all_close(actual, cpu_result, tol.atol, tol.rtol));
}

// lse may hold -inf (a row that saw no key): those must match exactly, the
// rest within f32 tolerance.
void expect_lse_close(const Tensor& cuda_lse, const Tensor& cpu_lse) {
  SCOPED_TRACE("lse");
  std::vector<float> actual = on_cpu(cuda_lse).to_floats(), expected = cpu_lse.to_floats();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool actual_inf = std::isinf(actual[i]), expected_inf = std::isinf(expected[i]);
    ASSERT_EQ(actual_inf, expected_inf) << "at flat index " << i << ": " << actual[i] << " vs " << expected[i];
    if (actual_inf) {
      ASSERT_EQ(actual[i], expected[i]) << "at flat index " << i;
      actual[i] = expected[i] = 0.0f;
    }
  }
  const Tensor a = Tensor::from_vector(actual, cpu_lse.shape()), e = Tensor::from_vector(expected, cpu_lse.shape());
  const Tolerance tol = tolerance_for(DType::f32, e);
  EXPECT_TRUE(all_close(a, e, tol.atol, tol.rtol));
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const char* what) {
  SCOPED_TRACE(what);
  const Tensor x = on_cpu(a), y = on_cpu(b);
  ASSERT_EQ(x.shape(), y.shape());
  ASSERT_EQ(x.dtype(), y.dtype());
  EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0);
}

enum class Documents { none, packed_i64, packed_i32, unsorted };

struct Case {
  const char* name;
  int64_t batch, q_len, k_len, heads, kv_heads, dim;
  bool causal;
  int64_t window;
  Documents documents;
  // q is uniform in [-q_range, q_range]: 30 makes scores of spread ~10, so
  // row maxima jump during the key loop (the forward's rescaling paths).
  double q_range = 1.0;
  // Context parallelism's placed chunks (ops/attention.h): query 0 and key 0
  // at these absolute positions (query_start -1: the default layout).
  int64_t query_start = -1, key_start = 0;
  float softcap = 0.0f;  // the mask's logit_softcap
};

// Packed: documents of 54 tokens from a different offset per batch row, so
// most 64-row tiles share no document (whole tiles skipped) and the rest mix
// two. Unsorted: ids that jump back and forth, masked element by element.
// Ids are those of absolute positions first, first + 1, ...
Tensor document_ids(int64_t batch, int64_t len, Documents kind, int64_t first = 0) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = first; j < first + len; ++j) {
      ids[static_cast<size_t>(b * len + j - first)] = kind == Documents::unsorted ? (j * 7 + b) % 3 : (j + 13 * b) / 54;
    }
  }
  const Tensor t = Tensor::from_vector(ids, {batch, len});
  return kind == Documents::packed_i32 ? t.to(DType::i32) : t;
}

struct Inputs {
  Tensor q, k, v, grad_out;
  ops::AttentionMask mask;  // on the CPU
  float scale;
};

Inputs make_inputs(const Case& c, DType dtype) {
  Inputs in;
  in.q = random_cpu({c.batch, c.q_len, c.heads, c.dim}, dtype, 11, -c.q_range, c.q_range);
  in.k = random_cpu({c.batch, c.k_len, c.kv_heads, c.dim}, dtype, 12);
  in.v = random_cpu({c.batch, c.k_len, c.kv_heads, c.dim}, dtype, 13);
  in.grad_out = random_cpu({c.batch, c.q_len, c.heads, c.dim}, dtype, 14);
  in.mask = ops::AttentionMask{c.causal, c.window, {}};
  in.mask.logit_softcap = c.softcap;
  if (c.documents != Documents::none) in.mask.document_ids = document_ids(c.batch, c.k_len, c.documents);
  if (c.query_start >= 0) {
    in.mask.query_start = c.query_start;
    in.mask.key_start = c.key_start;
    if (c.documents != Documents::none) {
      in.mask.document_ids = document_ids(c.batch, c.k_len, c.documents, c.key_start);
      in.mask.query_document_ids = document_ids(c.batch, c.q_len, c.documents, c.query_start);
    }
  }
  in.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  return in;
}

ops::AttentionMask mask_on_cuda(const ops::AttentionMask& mask) {
  ops::AttentionMask result = mask;
  if (mask.document_ids.defined()) result.document_ids = on_cuda(mask.document_ids);
  if (mask.query_document_ids.defined()) result.query_document_ids = on_cuda(mask.query_document_ids);
  return result;
}

class CudaAttentionTest : public ::testing::TestWithParam<std::tuple<Case, DType>> {};

TEST_P(CudaAttentionTest, MatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const auto& [c, dtype] = GetParam();
  const Inputs in = make_inputs(c, dtype);
  const ops::AttentionMask cuda_mask = mask_on_cuda(in.mask);

  const ops::AttentionOutput expected = ops::flash_attention(in.q, in.k, in.v, in.mask, in.scale);
  const ops::AttentionOutput actual =
      ops::flash_attention(on_cuda(in.q), on_cuda(in.k), on_cuda(in.v), cuda_mask, in.scale);
  expect_close(actual.out, expected.out, dtype, c.dim, "out");
  expect_lse_close(actual.lse, expected.lse);

  // Both backwards get the CPU forward's out and lse, so they differ only by
  // their own rounding.
  const ops::AttentionGrads cpu =
      ops::flash_attention_backward(in.grad_out, in.q, in.k, in.v, expected.out, expected.lse, in.mask, in.scale);
  const ops::AttentionGrads cuda =
      ops::flash_attention_backward(on_cuda(in.grad_out), on_cuda(in.q), on_cuda(in.k), on_cuda(in.v),
                                    on_cuda(expected.out), on_cuda(expected.lse), cuda_mask, in.scale);
  expect_close(cuda.grad_q, cpu.grad_q, dtype, c.dim, "grad_q");
  expect_close(cuda.grad_k, cpu.grad_k, dtype, c.dim, "grad_k");
  expect_close(cuda.grad_v, cpu.grad_v, dtype, c.dim, "grad_v");
}

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

// Lengths are not multiples of the 64-row tiles; windows and documents are
// shorter than a tile, so wholly visible, partial and skipped tiles all occur.
// D = 16, 32, 64 run the kernels compiled for D <= 64, D = 96 and 128 those for
// D <= 128; D = 5 (odd) checks columns past D and an even shared-memory stride.
// In bf16, D = 64 and 128 run the tensor-core kernels: the cases from
// "window_d128" on give those every mask kind as well.
// No case has a query row without a visible key: every query sees the key at
// its own position under every mask of ops/attention.h (see LseMinusInf).
const Case kCases[] = {
    {"causal", 2, 130, 130, 4, 4, 64, true, 0, Documents::none},
    {"full", 2, 77, 77, 2, 2, 16, false, 0, Documents::none},
    {"window", 1, 300, 300, 2, 1, 32, true, 40, Documents::none},
    {"window_not_causal", 1, 200, 200, 2, 2, 16, false, 40, Documents::none},
    {"documents_i64", 2, 300, 300, 4, 2, 32, true, 0, Documents::packed_i64},
    {"documents_i32", 2, 300, 300, 4, 2, 32, true, 0, Documents::packed_i32},
    {"documents_not_causal", 2, 150, 150, 2, 1, 16, false, 0, Documents::packed_i64},
    {"documents_unsorted", 1, 150, 150, 2, 1, 16, true, 0, Documents::unsorted},
    {"documents_window", 2, 260, 260, 2, 1, 64, true, 30, Documents::packed_i32},
    {"gqa_one_kv_head", 1, 130, 130, 4, 1, 128, true, 0, Documents::none},
    {"gqa_two_kv_heads", 2, 77, 77, 4, 2, 128, false, 0, Documents::none},
    {"decode", 2, 5, 300, 4, 2, 64, true, 0, Documents::none},
    {"shorter_queries", 1, 70, 200, 2, 1, 32, true, 150, Documents::packed_i64},
    {"head96", 1, 100, 100, 2, 2, 96, true, 0, Documents::none},
    {"head5", 1, 70, 70, 2, 1, 5, true, 0, Documents::none},
    {"long", 1, 1030, 1030, 2, 1, 64, true, 0, Documents::none},
    {"window_d128", 1, 300, 300, 2, 1, 128, true, 40, Documents::none},
    {"window_not_causal_d64", 1, 200, 200, 2, 2, 64, false, 40, Documents::none},
    {"documents_i64_d64", 2, 300, 300, 4, 2, 64, true, 0, Documents::packed_i64},
    {"documents_not_causal_d128", 2, 150, 150, 2, 1, 128, false, 0, Documents::packed_i32},
    {"documents_unsorted_d64", 1, 150, 150, 2, 1, 64, true, 0, Documents::unsorted},
    {"shorter_queries_d128", 1, 70, 200, 2, 1, 128, true, 150, Documents::packed_i64},
    {"decode_d128", 1, 3, 200, 4, 1, 128, true, 0, Documents::none},
    {"sharp_d64", 1, 200, 200, 2, 1, 64, true, 0, Documents::none, 30.0},
    {"sharp_not_causal_d128", 1, 130, 130, 2, 1, 128, false, 0, Documents::none, 30.0},
    // Sk - Sq = 62 and a window of 125 put the mask boundary one element inside
    // a tile's corner: an off-by-one in a whole-tile visibility test shows.
    {"corner_causal_d128", 1, 140, 202, 2, 1, 128, true, 0, Documents::none},
    {"corner_window_not_causal_d64", 1, 150, 212, 2, 1, 64, false, 125, Documents::none},
    // Placed chunks (context parallelism): queries after, overlapping, inside
    // a window of, and before (not causal) their keys; every query still sees
    // a key (the overlapping ones see their own position).
    {"placed_keys_before_d64", 2, 130, 150, 4, 2, 64, true, 0, Documents::none, 1.0, 400, 100},
    {"placed_keys_before_f32_path_d32", 1, 130, 150, 2, 1, 32, true, 0, Documents::none, 1.0, 400, 100},
    {"placed_overlap_documents_d64", 2, 100, 200, 2, 1, 64, true, 0, Documents::packed_i64, 1.0, 300, 200},
    {"placed_overlap_documents_d16", 2, 100, 200, 2, 1, 16, true, 0, Documents::packed_i32, 1.0, 300, 200},
    {"placed_window_d128", 1, 130, 200, 2, 1, 128, true, 150, Documents::none, 1.0, 500, 400},
    {"placed_after_not_causal_d16", 1, 77, 90, 2, 2, 16, false, 0, Documents::none, 1.0, 0, 500},
    {"placed_unsorted_not_causal_d64", 1, 70, 100, 2, 1, 64, false, 0, Documents::unsorted, 1.0, 50, 300},
    // Logit soft caps (Gemma 2) on wide scores (q_range 8: spread ~3; 30: ~10)
    // that the cap bends: the scalar kernels (f32, D = 32) and, in bf16, the
    // tensor-core ones (D = 64, 128), whose backward recovers the cap's slope
    // from the bf16 P (within the tolerance above: see ScoreMap).
    {"softcap_documents_window_d64", 2, 260, 260, 4, 2, 64, true, 30, Documents::packed_i64, 8.0, -1, 0, 5.0f},
    {"softcap_d128", 1, 200, 200, 2, 1, 128, true, 0, Documents::none, 30.0, -1, 0, 50.0f},
    {"softcap_not_causal_d128", 1, 130, 130, 2, 1, 128, false, 0, Documents::none, 8.0, -1, 0, 5.0f},
    {"softcap_gqa_documents_d32", 2, 150, 150, 4, 2, 32, true, 0, Documents::packed_i32, 8.0, -1, 0, 5.0f},
};

INSTANTIATE_TEST_SUITE_P(attention, CudaAttentionTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" + dtype_name(std::get<1>(info.param));
                         });

class CudaAttentionDTypeTest : public ::testing::TestWithParam<DType> {};

// Every gradient element is summed by one thread in a fixed order (no atomics),
// so the backward repeats bit for bit; the forward too.
TEST_P(CudaAttentionDTypeTest, BackwardIsDeterministic) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Case c{"packed", 2, 300, 300, 4, 2, 64, true, 100, Documents::packed_i64};
  const Inputs in = make_inputs(c, dtype);
  const ops::AttentionMask mask = mask_on_cuda(in.mask);
  const Tensor q = on_cuda(in.q), k = on_cuda(in.k), v = on_cuda(in.v), grad_out = on_cuda(in.grad_out);
  const auto run = [&] {
    const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, in.scale);
    return std::make_tuple(out, ops::flash_attention_backward(grad_out, q, k, v, out.out, out.lse, mask, in.scale));
  };
  const auto [out1, grads1] = run();
  const auto [out2, grads2] = run();
  expect_bitwise_equal(out1.out, out2.out, "out");
  expect_bitwise_equal(out1.lse, out2.lse, "lse");
  expect_bitwise_equal(grads1.grad_q, grads2.grad_q, "grad_q");
  expect_bitwise_equal(grads1.grad_k, grads2.grad_k, "grad_k");
  expect_bitwise_equal(grads1.grad_v, grads2.grad_v, "grad_v");
}

// A row that saw no key has lse = -inf (the forward's contract); the backward
// must give it P = dS = 0, hence a zero dQ row and no NaN anywhere. The masks
// cannot produce such a row (a query always sees its own position), so the
// lse is edited by hand, identically for both backends.
TEST_P(CudaAttentionDTypeTest, LseMinusInfRowsGetNoGradient) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  for (const int64_t dim : {16, 64}) {  // in bf16: the scalar kernels, then the tensor-core ones
    SCOPED_TRACE("D = " + std::to_string(dim));
    const Case c{"rows", 1, 70, 70, 2, 1, dim, true, 0, Documents::none};
    const Inputs in = make_inputs(c, dtype);
    const ops::AttentionOutput forward = ops::flash_attention(in.q, in.k, in.v, in.mask, in.scale);
    float* lse = forward.lse.data<float>();  // [B, Hq, Sq]
    for (const int64_t row : {int64_t{0}, int64_t{3}, int64_t{64}, int64_t{70 + 69}}) {
      lse[row] = -std::numeric_limits<float>::infinity();
    }
    const ops::AttentionGrads cpu =
        ops::flash_attention_backward(in.grad_out, in.q, in.k, in.v, forward.out, forward.lse, in.mask, in.scale);
    const ops::AttentionGrads cuda =
        ops::flash_attention_backward(on_cuda(in.grad_out), on_cuda(in.q), on_cuda(in.k), on_cuda(in.v),
                                      on_cuda(forward.out), on_cuda(forward.lse), mask_on_cuda(in.mask), in.scale);
    expect_close(cuda.grad_q, cpu.grad_q, dtype, dim, "grad_q");
    expect_close(cuda.grad_k, cpu.grad_k, dtype, dim, "grad_k");
    expect_close(cuda.grad_v, cpu.grad_v, dtype, dim, "grad_v");
    const std::vector<float> grad_q = on_cpu(cuda.grad_q).to_floats();  // [B, Sq, Hq, D]
    for (int64_t d = 0; d < c.dim; ++d) {
      EXPECT_EQ(grad_q[static_cast<size_t>((3 * c.heads + 0) * c.dim + d)], 0.0f) << "query 3, head 0, d " << d;
      EXPECT_EQ(grad_q[static_cast<size_t>((69 * c.heads + 1) * c.dim + d)], 0.0f) << "query 69, head 1, d " << d;
    }
  }
}

TEST_P(CudaAttentionDTypeTest, UnsupportedHeadDimNamesIt) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Tensor q = on_cuda(random_cpu({1, 8, 2, 160}, dtype, 1)), k = on_cuda(random_cpu({1, 8, 1, 160}, dtype, 2));
  expect_error([&] { ops::flash_attention(q, k, k, ops::AttentionMask{}, 0.1f); }, {"flash_attention", "D = 160"});
}

// The log-sum-exp merge of context parallelism: the CUDA kernel against the
// CPU one on the same accumulators and piece, with rows where the piece saw no
// key (left alone) and rows that saw nothing before (taking the piece whole).
// Both compute in f32 with expf/logf against std::exp/std::log: a few ulps.
TEST_P(CudaAttentionDTypeTest, MergeMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t batch = 2, seq = 37, heads = 3, dim = 24;
  const Tensor acc = random_cpu({batch, seq, heads, dim}, DType::f32, 21);
  const Tensor piece = random_cpu({batch, seq, heads, dim}, dtype, 22);
  std::vector<float> old_lse = random_cpu({batch, heads, seq}, DType::f32, 23).to_floats();
  std::vector<float> new_lse = random_cpu({batch, heads, seq}, DType::f32, 24).to_floats();
  for (size_t i = 0; i < old_lse.size(); i += 5) old_lse[i] = -std::numeric_limits<float>::infinity();
  for (size_t i = 2; i < new_lse.size(); i += 7) new_lse[i] = -std::numeric_limits<float>::infinity();
  const Tensor lse_acc = Tensor::from_floats(old_lse, {batch, heads, seq});
  const Tensor lse = Tensor::from_floats(new_lse, {batch, heads, seq});
  const Tensor cuda_acc = on_cuda(acc), cuda_lse_acc = on_cuda(lse_acc);
  ops::attention_merge_(acc, lse_acc, piece, lse);
  ops::attention_merge_(cuda_acc, cuda_lse_acc, on_cuda(piece), on_cuda(lse));
  expect_close(cuda_acc, acc, DType::f32, dim, "out_acc");
  expect_lse_close(cuda_lse_acc, lse_acc);
}

INSTANTIATE_TEST_SUITE_P(attention, CudaAttentionDTypeTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace attention_test
}  // namespace titan::testing
