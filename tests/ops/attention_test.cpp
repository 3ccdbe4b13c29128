// Flash attention (forward and backward) against the float64 PyTorch reference
// in f32 and bf16, against the naive materialised-scores path through autograd
// for every mask kind, plus its memory bound, thread-count independence and
// argument errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/allocator.h"
#include "titan/nn/functional.h"
#include "titan/ops/attention.h"

namespace titan {
namespace {

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

}  // namespace
}  // namespace titan
