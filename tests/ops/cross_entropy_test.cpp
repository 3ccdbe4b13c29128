// Cross-entropy against the float64 PyTorch reference: the plain op forward
// and backward, and the fused linear cross-entropy over several chunkings, in
// f32 and bf16; the fused path against linear + cross_entropy through
// autograd; ignored rows, bad targets and shapes; the fused path's memory bound.
//
// CUDA cross-entropy (forward and backward) against the CPU backend on the
// same logits: f32 and bf16, i32 and i64 targets, ignored rows, softcap,
// z-loss, mean and sum, vocabularies not a multiple of the block.
//
// CUDA fused linear cross-entropy against the CPU backend's on the same
// inputs (loss, grad_hidden, grad_weight, counted tokens) over chunkings that
// do and do not divide N and V, ignored rows, softcap, z-loss, sum and mean,
// in f32 and bf16; against the unfused CUDA path (matmul + cross_entropy);
// determinism, all-ignored and bad-target behaviour, vocabulary parallelism
// through `combine` (device pointers on CUDA), and the memory bound.
//
// Tolerances are tolerance_for(): the logits are f32 GEMM results in both
// dtypes (bf16 products are exact in f32), so the loss is compared at f32
// tolerance; grad_hidden is stored in the input dtype and, for bf16, the
// gradient tile is rounded to bf16 before its GEMMs (on both backends), so the
// gradients are compared at the input dtype's tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/allocator.h"
#include "titan/core/generator.h"
#include "titan/nn/functional.h"
#include "titan/ops/cpu/onednn/gemm.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"

#if defined(TITAN_WITH_CUDA)
#include <cuda_runtime.h>

#include "titan/ops/cuda/stream.h"
#endif

namespace titan {
namespace cross_entropy_test {

ops::FusedCrossEntropyOptions fused_options(const ops::CrossEntropyOptions& loss, int64_t token_chunk,
                                            int64_t vocab_chunk) {
  ops::FusedCrossEntropyOptions options;
  options.loss = loss;
  options.token_chunk = token_chunk;
  options.vocab_chunk = vocab_chunk;
  return options;
}

using testing::ReferenceCase;

ops::CrossEntropyOptions options_of(const ReferenceCase& ref) {
  ops::CrossEntropyOptions options;
  options.softcap = static_cast<float>(ref.meta_double("softcap"));
  options.z_loss = static_cast<float>(ref.meta_double("z_loss"));
  options.mean = ref.meta_int("mean") != 0;
  options.ignore_index = ref.meta_int("ignore_index");
  return options;
}

// Compared at the tolerance of `dtype`, the precision the result was computed in.
void expect_close(const Tensor& actual, const Tensor& expected, DType dtype) {
  const auto tol = testing::tolerance_for(dtype, expected);
  EXPECT_TRUE(testing::all_close(actual, expected, tol.atol, tol.rtol));
}

int64_t count_kept(const Tensor& targets, int64_t ignore_index) {
  int64_t kept = 0;
  for (int64_t t : targets.to_ints()) kept += t != ignore_index;
  return kept;
}

// logsumexp of each row of the (capped) logits, in double: an independent check of the lse output.
Tensor reference_lse(const Tensor& logits, float softcap) {
  const std::vector<float> values = logits.to_floats();
  const int64_t rows = logits.size(0), cols = logits.size(1);
  std::vector<float> lse(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> z(static_cast<size_t>(cols));
    double row_max = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) {
      const double x = values[static_cast<size_t>(r * cols + c)];
      z[static_cast<size_t>(c)] = softcap > 0 ? softcap * std::tanh(x / softcap) : x;
      row_max = std::max(row_max, z[static_cast<size_t>(c)]);
    }
    double sum = 0.0;
    for (double v : z) sum += std::exp(v - row_max);
    lse[static_cast<size_t>(r)] = static_cast<float>(row_max + std::log(sum));
  }
  return Tensor::from_floats(lse, {rows});
}

class CrossEntropyTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(CrossEntropyTest, PlainMatchesReference) {
  const auto& [name, dtype] = GetParam();
  ReferenceCase ref("cross_entropy_" + name);
  const ops::CrossEntropyOptions options = options_of(ref);
  const Tensor logits = ref.get("logits", dtype), targets = ref.get("targets");
  const ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets, options);
  EXPECT_EQ(out.counted_tokens, count_kept(targets, options.ignore_index));
  // bf16: the reference logits are rounded to bf16 here, so the loss moves by up to ~2^-9 of the logits' scale.
  expect_close(out.loss, ref.get("loss"), dtype);
  // lse is computed in f32 from the logits as given (already rounded for bf16): f32 tolerance for both.
  expect_close(out.lse, reference_lse(logits, options.softcap), DType::f32);

  // A loss gradient of 2 (exact in any dtype) checks that grad_loss scales the result.
  const Tensor grad =
      ops::cross_entropy_backward(Tensor::full({}, 2.0), logits, targets, out.lse, out.counted_tokens, options);
  EXPECT_EQ(grad.dtype(), dtype);
  std::vector<float> doubled = ref.get("grad_logits").to_floats();
  for (float& v : doubled) v *= 2.0f;
  expect_close(grad, Tensor::from_floats(doubled, logits.shape()), dtype);
}

TEST_P(CrossEntropyTest, FusedMatchesReferenceForEveryChunking) {
  const auto& [name, dtype] = GetParam();
  ReferenceCase ref("cross_entropy_" + name);
  const Tensor hidden = ref.get("hidden", dtype), weight = ref.get("weight", dtype), targets = ref.get("targets");
  for (int64_t token_chunk : {7, 1024}) {
    for (int64_t vocab_chunk : {0, 16, 37, 150}) {
      SCOPED_TRACE("token_chunk " + std::to_string(token_chunk) + ", vocab_chunk " + std::to_string(vocab_chunk));
      ops::FusedCrossEntropyOptions options = fused_options(options_of(ref), token_chunk, vocab_chunk);
      const ops::FusedCrossEntropyOutput out = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
      EXPECT_EQ(out.counted_tokens, count_kept(targets, options.loss.ignore_index));
      // The logits are f32 GEMM results even from bf16 operands (exact
      // products, f32 sums), so the loss is f32-accurate in both dtypes.
      expect_close(out.loss, ref.get("loss"), DType::f32);
      EXPECT_EQ(out.grad_hidden.dtype(), dtype);
      expect_close(out.grad_hidden, ref.get("grad_hidden"), dtype);
      // grad_weight is stored in f32, but for bf16 inputs d(logits) is rounded
      // to bf16 before its GEMM (as in the plain bf16 path): bf16 tolerance.
      EXPECT_EQ(out.grad_weight.dtype(), DType::f32);
      expect_close(out.grad_weight, ref.get("grad_weight"), dtype);

      // No gradients asked for: the same loss from the forward pass alone.
      options.compute_grads = false;
      const ops::FusedCrossEntropyOutput loss_only = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
      EXPECT_FALSE(loss_only.grad_hidden.defined());
      EXPECT_EQ(loss_only.loss.item(), out.loss.item());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyTest,
                         ::testing::Combine(::testing::Values("plain", "sum", "softcap", "zloss", "softcap_zloss_sum"),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + dtype_name(std::get<1>(info.param));
                         });

// Fixed order of accumulation: two runs give the same bits.
TEST(CrossEntropy, FusedIsDeterministic) {
  ReferenceCase ref("cross_entropy_softcap_zloss_sum");
  const Tensor hidden = ref.get("hidden"), weight = ref.get("weight"), targets = ref.get("targets");
  const ops::FusedCrossEntropyOptions options = fused_options(options_of(ref), 7, 37);
  const auto first = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
  const auto second = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
  EXPECT_EQ(first.loss.item(), second.loss.item());
  EXPECT_EQ(first.grad_hidden.to_floats(), second.grad_hidden.to_floats());
  EXPECT_EQ(first.grad_weight.to_floats(), second.grad_weight.to_floats());
}

Tensor random_tensor(const Shape& shape, double std, DType dtype, Generator& generator) {
  Tensor values = Tensor::empty(shape);
  ops::normal_(values, 0.0, std, generator);
  return values.to(dtype);
}

// Targets in [0, vocab) with every fifth row ignored.
Tensor random_targets(int64_t rows, int64_t vocab, DType dtype) {
  std::vector<int64_t> values(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) values[static_cast<size_t>(r)] = r % 5 == 2 ? -100 : (r * 7919 + 13) % vocab;
  return Tensor::from_vector(values, {rows}).to(dtype);
}

struct LossAndGrads {
  double loss;
  Tensor grad_hidden, grad_weight;
};

LossAndGrads run_autograd(const Tensor& hidden_values, const Tensor& weight_values, const Tensor& targets,
                          const ops::FusedCrossEntropyOptions& options, float loss_scale, bool fused) {
  Tensor hidden = hidden_values.clone(), weight = weight_values.clone();
  hidden.set_requires_grad(true);
  weight.set_requires_grad(true);
  const Tensor loss = fused ? F::fused_linear_cross_entropy(hidden, weight, targets, options)
                            : F::cross_entropy(F::linear(hidden, weight), targets, options.loss);
  autograd::backward({loss_scale == 1.0f ? loss : F::scale(loss, loss_scale)});
  return {loss.item(), hidden.grad(), weight.grad()};
}

class FusedAutogradTest : public ::testing::TestWithParam<DType> {};

// The switch the trainer flips: fused linear cross-entropy vs linear + cross_entropy.
TEST_P(FusedAutogradTest, MatchesLinearPlusCrossEntropy) {
  const DType dtype = GetParam();
  Generator generator(7);
  const int64_t rows = 57, dim = 40, vocab = 300;
  const Tensor hidden = random_tensor({rows, dim}, 1.0, dtype, generator);
  const Tensor weight = random_tensor({vocab, dim}, 0.3, dtype, generator);
  ops::CrossEntropyOptions capped;
  capped.softcap = 6.0f;
  capped.z_loss = 1e-3f;
  capped.mean = false;
  for (const ops::CrossEntropyOptions& loss_options : {ops::CrossEntropyOptions{}, capped}) {
    for (DType target_dtype : {DType::i64, DType::i32}) {
      for (float loss_scale : {1.0f, 3.0f}) {
        SCOPED_TRACE(fmt::format("softcap {}, targets {}, loss scaled by {}", loss_options.softcap,
                                 dtype_name(target_dtype), loss_scale));
        const Tensor targets = random_targets(rows, vocab, target_dtype);
        const ops::FusedCrossEntropyOptions options = fused_options(loss_options, 16, 64);
        const LossAndGrads fused = run_autograd(hidden, weight, targets, options, loss_scale, true);
        const LossAndGrads plain = run_autograd(hidden, weight, targets, options, loss_scale, false);
        // bf16: the plain path rounds the logits to bf16 and the fused path does
        // not, so the two differ by bf16 rounding (tolerance_for's assumption).
        const double loss_tol = dtype == DType::bf16 ? 2e-2 * std::fabs(plain.loss) : 1e-5 * std::fabs(plain.loss);
        EXPECT_NEAR(fused.loss, plain.loss, loss_tol);
        ASSERT_TRUE(fused.grad_hidden.defined() && fused.grad_weight.defined());
        EXPECT_EQ(fused.grad_hidden.dtype(), dtype);
        EXPECT_EQ(fused.grad_weight.dtype(), dtype);
        expect_close(fused.grad_hidden, plain.grad_hidden, dtype);
        expect_close(fused.grad_weight, plain.grad_weight, dtype);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, FusedAutogradTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every element exactly 0 (a NaN fails, as it would not in max_abs).
void expect_all_zero(const Tensor& tensor) {
  for (float v : tensor.to_floats()) ASSERT_EQ(v, 0.0f);
}

TEST(CrossEntropy, AllRowsIgnoredGiveZeroLossAndGradients) {
  ReferenceCase ref("cross_entropy_zloss");
  const Tensor logits = ref.get("logits"), hidden = ref.get("hidden"), weight = ref.get("weight");
  for (bool mean : {true, false}) {
    ops::CrossEntropyOptions options = options_of(ref);
    options.mean = mean;
    options.ignore_index = 3;  // any value can be the ignored one
    const Tensor targets = Tensor::full({logits.size(0)}, 3.0, DType::i64);
    const ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets, options);
    EXPECT_EQ(out.counted_tokens, 0);
    EXPECT_EQ(out.loss.item(), 0.0);
    const Tensor grad = ops::cross_entropy_backward(Tensor::full({}, 1.0), logits, targets, out.lse, 0, options);
    expect_all_zero(grad);

    for (int64_t vocab_chunk : {0, 37}) {
      const auto fused =
          ops::fused_linear_cross_entropy(hidden, weight, targets, fused_options(options, 7, vocab_chunk));
      EXPECT_EQ(fused.counted_tokens, 0);
      EXPECT_EQ(fused.loss.item(), 0.0);
      expect_all_zero(fused.grad_hidden);
      expect_all_zero(fused.grad_weight);
    }
  }
}

TEST(CrossEntropy, OutOfRangeTargetNamesRowAndValue) {
  ReferenceCase ref("cross_entropy_plain");
  const Tensor logits = ref.get("logits"), hidden = ref.get("hidden"), weight = ref.get("weight");
  const ops::CrossEntropyOptions options = options_of(ref);
  for (int64_t bad : {int64_t{150}, int64_t{-1}}) {
    std::vector<int64_t> values = ref.get("targets").to_ints();
    values[12] = bad;
    for (DType target_dtype : {DType::i64, DType::i32}) {
      const Tensor targets = Tensor::from_vector(values, {logits.size(0)}).to(target_dtype);
      const std::vector<std::string> words = {"row 12", "target " + std::to_string(bad)};
      titan::testing::expect_error([&] { ops::cross_entropy(logits, targets, options); }, words);
      const Tensor lse = Tensor::zeros({logits.size(0)});
      titan::testing::expect_error(
          [&] { ops::cross_entropy_backward(Tensor::full({}, 1.0), logits, targets, lse, 35, options); }, words);
      titan::testing::expect_error(
          [&] { ops::fused_linear_cross_entropy(hidden, weight, targets, fused_options(options, 7, 37)); }, words);
    }
  }
}

TEST(CrossEntropy, BadShapesNameTheOp) {
  const Tensor logits = Tensor::zeros({4, 10}), targets = Tensor::zeros({4}, DType::i64);
  const Tensor hidden = Tensor::zeros({4, 8}), weight = Tensor::zeros({10, 8});
  const std::vector<std::string> plain = {"cross_entropy"}, fused = {"fused_linear_cross_entropy"};
  titan::testing::expect_error([&] { ops::cross_entropy(Tensor::zeros({40}), targets, {}); }, plain);
  titan::testing::expect_error([&] { ops::cross_entropy(logits, Tensor::zeros({5}, DType::i64), {}); }, plain);
  titan::testing::expect_error([&] { ops::cross_entropy(logits, Tensor::zeros({4}), {}); }, plain);  // f32 targets
  titan::testing::expect_error([&] { ops::cross_entropy(logits.to(DType::i32), targets, {}); }, plain);
  titan::testing::expect_error(
      [&] { ops::cross_entropy_backward(Tensor::full({}, 1.0), logits, targets, Tensor::zeros({3}), 4, {}); },
      {"cross_entropy_backward", "lse"});
  titan::testing::expect_error(
      [&] {
        ops::fused_linear_cross_entropy(hidden, Tensor::zeros({10, 9}), targets, {});
      },
      fused);
  titan::testing::expect_error([&] { ops::fused_linear_cross_entropy(hidden, Tensor::zeros({10}), targets, {}); },
                               fused);
  titan::testing::expect_error([&] { ops::fused_linear_cross_entropy(hidden, weight.to(DType::bf16), targets, {}); },
                               fused);
  titan::testing::expect_error(
      [&] { ops::fused_linear_cross_entropy(hidden, weight, Tensor::zeros({3}, DType::i64), {}); }, fused);
  titan::testing::expect_error(
      [&] {
        ops::FusedCrossEntropyOptions options;
        options.token_chunk = 0;
        ops::fused_linear_cross_entropy(hidden, weight, targets, options);
      },
      fused);
}

// Bytes the fused op allocates beyond its inputs: peak during the call minus
// what was live before it, minus its outputs.
int64_t fused_scratch_bytes(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                            const ops::FusedCrossEntropyOptions& options) {
  Allocator& allocator = allocator_for(DeviceType::cpu);
  const int64_t live_before = allocator.stats().live_bytes;
  allocator.reset_peak();
  const ops::FusedCrossEntropyOutput out = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
  const int64_t outputs = static_cast<int64_t>(out.loss.nbytes() + out.grad_hidden.nbytes() + out.grad_weight.nbytes());
  return allocator.stats().peak_bytes - live_before - outputs;
}

// The point of the fused path: memory for logits is one token_chunk x
// vocab_chunk tile, whatever N and V. In f32 the only scratch the op allocates
// is that f32 tile (its gradient is formed in place); bf16 adds the tile's
// bf16 gradient (2 bytes per element) and an f32 [token_chunk, D] grad_hidden
// accumulator. A 1% allowance covers allocator rounding and 0-d tensors.
TEST(CrossEntropy, FusedMemoryIsOneTile) {
  Generator generator(3);
  const int64_t rows = 4096, vocab = 32768, dim = 64, token_chunk = 1024, vocab_chunk = 8192;
  const Tensor targets = random_targets(rows, vocab, DType::i64);
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor hidden = random_tensor({rows, dim}, 1.0, dtype, generator);
    const Tensor weight = random_tensor({vocab, dim}, 0.1, dtype, generator);
    const int64_t tile = token_chunk * vocab_chunk;
    int64_t bound = dtype == DType::f32 ? tile * 4 : tile * 6 + token_chunk * dim * 4;
    // Where oneDNN has no bf16 matmul the GEMMs widen their operands: the
    // weight chunk whole and one panel of the gradient tile.
    if (dtype == DType::bf16 && ops::cpu::gemm_widens_bf16()) {
      bound += vocab_chunk * dim * 4 + ops::cpu::kGemmWidenPanelElements * 4;
    }
    const int64_t scratch = fused_scratch_bytes(hidden, weight, targets, fused_options({}, token_chunk, vocab_chunk));
    EXPECT_LE(scratch, bound + bound / 100);
    // The tile is counted, so the measurement does see the op's scratch.
    EXPECT_GE(scratch, tile * 4);
    // Whole f32 logits would be 512 MiB; the tile is 32 MiB (48 with the bf16 gradient tile).
    EXPECT_LT(scratch, rows * vocab * 4 / 8);
  }
}

}  // namespace cross_entropy_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace cross_entropy_test {

// Targets in [0, vocab), every fifth row ignore_index.
Tensor make_targets(int64_t rows, int64_t vocab, int64_t ignore_index, DType dtype) {
  std::vector<int64_t> values(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) values[static_cast<size_t>(r)] = r % 5 == 2 ? ignore_index : (r * 7919) % vocab;
  const Tensor targets = Tensor::from_vector(values, {rows});
  return dtype == DType::i64 ? targets : targets.to(dtype);
}

struct Case {
  const char* name;
  int64_t rows, vocab;
  ops::CrossEntropyOptions options;
};

std::vector<Case> cases() {
  ops::CrossEntropyOptions plain;
  ops::CrossEntropyOptions capped;
  capped.softcap = 30.0f;
  capped.z_loss = 1e-3f;
  capped.mean = false;
  ops::CrossEntropyOptions in_vocab_ignore;  // an ignore_index that is also a valid id
  in_vocab_ignore.ignore_index = 3;
  in_vocab_ignore.z_loss = 1e-4f;
  return {{"plain", 37, 1003, plain},
          {"softcap_zloss_sum", 37, 1003, capped},
          {"ignore_3", 19, 300, in_vocab_ignore},
          {"wide", 3, 50257, capped}};
}

// Both compute in f32 from the same inputs; they differ only in exp (the
// CPU's polynomial vs expf, ~2 ulp each), tanh (~cap * 1e-7 = 3e-6 absolute)
// and the order of the row sums. lse (~40 here) then differs by a few 1e-6,
// the loss likewise: 1e-5 relative leaves margin. Each softmax term moves by
// that difference in z - lse, up to ~6e-6 relative, and the target column
// subtracts the scale from it, so gradients get 2e-5 of their largest value
// as an absolute term besides 2e-5 relative; bf16 may also round to the
// neighbouring value, 2^-8 relative (1e-2 leaves margin). A wrong term (the
// softcap derivative, z-loss at 1e-4 * lse * 2, the scale) is >= 8e-3 relative.
TEST(CudaCrossEntropy, ForwardAndBackwardMatchCpu) {
  TITAN_REQUIRE_CUDA();
  for (const Case& c : cases()) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (DType target_dtype : {DType::i32, DType::i64}) {
        SCOPED_TRACE(std::string(c.name) + ", " + dtype_name(dtype) + ", targets " + dtype_name(target_dtype));
        const Tensor logits = random_cpu({c.rows, c.vocab}, dtype, 31, -40.0, 40.0);
        const Tensor targets = make_targets(c.rows, c.vocab, c.options.ignore_index, target_dtype);
        const ops::CrossEntropyOutput expected = ops::cross_entropy(logits, targets, c.options);
        const Tensor g_logits = on_cuda(logits), g_targets = on_cuda(targets);
        const ops::CrossEntropyOutput actual = ops::cross_entropy(g_logits, g_targets, c.options);
        EXPECT_EQ(actual.counted_tokens, expected.counted_tokens);
        EXPECT_EQ(actual.loss.device(), Device::cuda());
        EXPECT_TRUE(all_close(on_cpu(actual.loss), expected.loss, 1e-6, 1e-5));
        EXPECT_TRUE(all_close(on_cpu(actual.lse), expected.lse, 1e-6, 1e-5));

        const Tensor grad_loss = Tensor::full({}, 0.7);
        const Tensor expected_grad =
            ops::cross_entropy_backward(grad_loss, logits, targets, expected.lse, expected.counted_tokens, c.options);
        const Tensor actual_grad = ops::cross_entropy_backward(on_cuda(grad_loss), g_logits, g_targets, actual.lse,
                                                               actual.counted_tokens, c.options);
        EXPECT_EQ(actual_grad.dtype(), dtype);
        const double scale = max_abs(expected_grad);
        const bool f32 = dtype == DType::f32;
        EXPECT_TRUE(all_close(on_cpu(actual_grad), expected_grad, (f32 ? 2e-5 : 1e-3) * scale, f32 ? 2e-5 : 1e-2));
      }
    }
  }
}

TEST(CudaCrossEntropy, AllRowsIgnoredGiveZeros) {
  TITAN_REQUIRE_CUDA();
  const Tensor logits = on_cuda(random_cpu({6, 77}, DType::f32, 2));
  const Tensor targets = on_cuda(Tensor::full({6}, -100, DType::i64));
  const ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets, {});
  EXPECT_EQ(out.counted_tokens, 0);
  EXPECT_EQ(out.loss.item(), 0.0);
  const Tensor grad = ops::cross_entropy_backward(on_cuda(Tensor::full({}, 1.0)), logits, targets, out.lse, 0, {});
  EXPECT_EQ(max_abs(on_cpu(grad)), 0.0);
}

TEST(CudaCrossEntropy, BadTargetIsAnError) {
  TITAN_REQUIRE_CUDA();
  const Tensor logits = on_cuda(random_cpu({5, 1003}, DType::f32, 2));
  const Tensor targets = on_cuda(Tensor::from_vector<int64_t>({1, -100, 7, 5000, -3}, {5}));
  expect_error([&] { ops::cross_entropy(logits, targets, {}); }, {"target 5000", "row 3", "[0, 1003)"});
}

constexpr int64_t kIgnore = -100;

// Ids in [0, vocab), with every fifth row (from row 2) ignore_index.
Tensor make_targets(int64_t rows, int64_t vocab, DType dtype, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<int64_t> values(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    values[static_cast<size_t>(r)] = r % 5 == 2 ? kIgnore : static_cast<int64_t>(generator() % vocab);
  }
  const Tensor targets = Tensor::from_vector(values, {rows});
  return dtype == DType::i64 ? targets : targets.to(dtype);
}

// Host tensors; logits hidden @ weight^T of order 1, so softmax is neither flat nor one-hot.
struct Problem {
  Tensor hidden, weight, targets;
};

Problem make_problem(int64_t rows, int64_t dim, int64_t vocab, DType dtype, DType target_dtype, uint64_t seed) {
  return {random_cpu({rows, dim}, dtype, seed), random_cpu({vocab, dim}, dtype, seed + 1, -0.5, 0.5),
          make_targets(rows, vocab, target_dtype, seed + 2)};
}

struct LossVariant {
  std::string name;
  ops::CrossEntropyOptions options;
};

std::vector<LossVariant> loss_variants() {
  auto make = [](float softcap, float z_loss, bool mean) {
    ops::CrossEntropyOptions options;
    options.ignore_index = kIgnore;
    options.softcap = softcap;  // 2: the logits reach ~3, so the cap bends them
    options.z_loss = z_loss;    // 1e-2: large enough to move the loss visibly
    options.mean = mean;
    return options;
  };
  return {{"mean", make(0.0f, 0.0f, true)},
          {"sum", make(0.0f, 0.0f, false)},
          {"softcap", make(2.0f, 0.0f, true)},
          {"zloss", make(0.0f, 1e-2f, true)},
          {"softcap_zloss_sum", make(2.0f, 1e-2f, false)}};
}

ops::FusedCrossEntropyOptions fused_options(const ops::CrossEntropyOptions& loss, int64_t token_chunk,
                                            int64_t vocab_chunk) {
  ops::FusedCrossEntropyOptions options;
  options.loss = loss;
  options.token_chunk = token_chunk;
  options.vocab_chunk = vocab_chunk;
  return options;
}

// `actual` on any device against a host `expected`, at the tolerance of `dtype`.
::testing::AssertionResult close_at(const Tensor& actual, const Tensor& expected, DType dtype) {
  const Tolerance tol = tolerance_for(dtype, expected);
  return all_close(on_cpu(actual), expected, tol.atol, tol.rtol);
}

ops::FusedCrossEntropyOutput run_on_cuda(const Problem& p, const ops::FusedCrossEntropyOptions& options) {
  return ops::fused_linear_cross_entropy(on_cuda(p.hidden), on_cuda(p.weight), on_cuda(p.targets), options);
}

void expect_matches_cpu(const Problem& p, ops::FusedCrossEntropyOptions options) {
  const DType dtype = p.hidden.dtype();
  const ops::FusedCrossEntropyOutput expected = ops::fused_linear_cross_entropy(p.hidden, p.weight, p.targets, options);
  const ops::FusedCrossEntropyOutput actual = run_on_cuda(p, options);
  EXPECT_EQ(actual.counted_tokens, expected.counted_tokens);
  EXPECT_TRUE(actual.loss.device().is_cuda());
  EXPECT_TRUE(close_at(actual.loss, expected.loss, DType::f32)) << "loss";
  ASSERT_TRUE(actual.grad_hidden.defined() && actual.grad_weight.defined());
  EXPECT_EQ(actual.grad_hidden.dtype(), dtype);
  EXPECT_EQ(actual.grad_weight.dtype(), DType::f32);
  EXPECT_TRUE(close_at(actual.grad_hidden, expected.grad_hidden, dtype)) << "grad_hidden";
  EXPECT_TRUE(close_at(actual.grad_weight, expected.grad_weight, dtype)) << "grad_weight";

  // No gradients asked for: the same tiles and row kernels give the same loss, bit for bit.
  options.compute_grads = false;
  const ops::FusedCrossEntropyOutput loss_only = run_on_cuda(p, options);
  EXPECT_FALSE(loss_only.grad_hidden.defined());
  EXPECT_EQ(loss_only.loss.item(), actual.loss.item());
  EXPECT_EQ(loss_only.counted_tokens, actual.counted_tokens);
}

class CudaFusedCrossEntropyTest : public ::testing::TestWithParam<DType> {};

// 45 rows and 150 vocabulary entries: chunks of 7 and 16 rows, 16 and 37
// columns leave ragged last chunks; 0, 150 and 1000 columns are one chunk.
TEST_P(CudaFusedCrossEntropyTest, MatchesCpuForEveryChunking) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const std::vector<LossVariant> variants = loss_variants();
  for (size_t v = 0; v < variants.size(); ++v) {
    const Problem p = make_problem(45, 24, 150, dtype, v % 2 == 0 ? DType::i64 : DType::i32, 100 + v);
    for (int64_t token_chunk : {7, 16, 1024}) {
      for (int64_t vocab_chunk : {0, 16, 37, 150, 1000}) {
        SCOPED_TRACE(variants[v].name + ", token_chunk " + std::to_string(token_chunk) + ", vocab_chunk " +
                     std::to_string(vocab_chunk));
        expect_matches_cpu(p, fused_options(variants[v].options, token_chunk, vocab_chunk));
      }
    }
  }
}

// Shapes where the GEMMs take their tensor-core paths and rows span many warps.
TEST_P(CudaFusedCrossEntropyTest, LargerProblemMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Problem p = make_problem(700, 256, 5000, dtype, DType::i64, 7);
  const LossVariant softcap = loss_variants()[2];
  for (int64_t vocab_chunk : {0, 2048}) {
    SCOPED_TRACE("vocab_chunk " + std::to_string(vocab_chunk));
    expect_matches_cpu(p, fused_options(softcap.options, 256, vocab_chunk));
  }
}

// The switch the trainer flips: the fused loss vs matmul + cross_entropy on
// the device (in f32 from the same, possibly bf16-rounded, inputs).
TEST_P(CudaFusedCrossEntropyTest, MatchesUnfusedCudaPath) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Problem p = make_problem(90, 48, 300, dtype, DType::i64, 11);
  const Tensor hidden = on_cuda(p.hidden), weight = on_cuda(p.weight), targets = on_cuda(p.targets);
  const Tensor hidden32 = hidden.to(DType::f32), weight32 = weight.to(DType::f32);
  for (const LossVariant& variant : loss_variants()) {
    SCOPED_TRACE(variant.name);
    const Tensor logits = ops::matmul(hidden32, weight32.transpose(0, 1));
    const ops::CrossEntropyOutput plain = ops::cross_entropy(logits, targets, variant.options);
    const Tensor grad_logits = ops::cross_entropy_backward(on_cuda(Tensor::full({}, 1.0)), logits, targets, plain.lse,
                                                           plain.counted_tokens, variant.options);
    const Tensor grad_hidden = ops::matmul(grad_logits, weight32);
    const Tensor grad_weight = ops::matmul(grad_logits.transpose(0, 1), hidden32);

    const auto fused = ops::fused_linear_cross_entropy(hidden, weight, targets, fused_options(variant.options, 32, 64));
    EXPECT_EQ(fused.counted_tokens, plain.counted_tokens);
    EXPECT_TRUE(close_at(fused.loss, on_cpu(plain.loss), DType::f32)) << "loss";
    EXPECT_TRUE(close_at(fused.grad_hidden, on_cpu(grad_hidden), dtype)) << "grad_hidden";
    EXPECT_TRUE(close_at(fused.grad_weight, on_cpu(grad_weight), dtype)) << "grad_weight";
  }
}

// No float atomics and fixed reduction orders: two runs give the same bits.
TEST_P(CudaFusedCrossEntropyTest, IsDeterministic) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Problem p = make_problem(300, 64, 1000, dtype, DType::i64, 13);
  for (int64_t vocab_chunk : {0, 300}) {
    const ops::FusedCrossEntropyOptions options = fused_options(loss_variants()[4].options, 64, vocab_chunk);
    const auto first = run_on_cuda(p, options);
    const auto second = run_on_cuda(p, options);
    for (const auto& [a, b] : {std::pair{first.loss, second.loss}, std::pair{first.grad_hidden, second.grad_hidden},
                               std::pair{first.grad_weight, second.grad_weight}}) {
      const Tensor x = on_cpu(a), y = on_cpu(b);
      EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0) << "vocab_chunk " << vocab_chunk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaFusedCrossEntropyTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every element exactly 0 (a NaN fails, as it would not in a tolerance check).
void expect_all_zero(const Tensor& tensor) {
  for (float v : on_cpu(tensor).to_floats()) ASSERT_EQ(v, 0.0f);
}

TEST(CudaFusedCrossEntropy, AllRowsIgnoredGiveZeroLossAndGradients) {
  TITAN_REQUIRE_CUDA();
  Problem p = make_problem(20, 8, 40, DType::f32, DType::i64, 17);
  p.targets = Tensor::full({20}, 3.0, DType::i64);
  for (bool mean : {true, false}) {
    ops::CrossEntropyOptions options;
    options.ignore_index = 3;  // any value can be the ignored one
    options.mean = mean;
    for (int64_t vocab_chunk : {0, 7}) {
      const auto out = run_on_cuda(p, fused_options(options, 6, vocab_chunk));
      EXPECT_EQ(out.counted_tokens, 0);
      EXPECT_EQ(out.loss.item(), 0.0);
      expect_all_zero(out.grad_hidden);
      expect_all_zero(out.grad_weight);
    }
  }
}

TEST(CudaFusedCrossEntropy, OutOfRangeTargetNamesRowAndValue) {
  TITAN_REQUIRE_CUDA();
  const Problem p = make_problem(40, 8, 150, DType::f32, DType::i64, 19);
  for (int64_t bad : {int64_t{150}, int64_t{-1}}) {
    std::vector<int64_t> values = p.targets.to_ints();
    values[12] = bad;
    for (DType target_dtype : {DType::i64, DType::i32}) {
      Problem broken = p;
      broken.targets = Tensor::from_vector(values, {40}).to(target_dtype);
      ops::CrossEntropyOptions options;
      options.ignore_index = kIgnore;
      expect_error([&] { run_on_cuda(broken, fused_options(options, 7, 37)); },
                   {"fused_linear_cross_entropy", "row 12", "target " + std::to_string(bad)});
    }
  }
}

#if defined(TITAN_WITH_CUDA)
// Vocabulary parallelism in one process: each shard's combine step gets the
// whole vocabulary's lse and target logits (what the all-reduce would give,
// computed here on the CPU) copied into the DEVICE pointers it is handed, on
// the current stream. Each shard must then report the whole loss, its rows of
// grad_weight, and a part of grad_hidden that sums over the shards.
TEST(CudaFusedCrossEntropy, VocabularyShardsCombineThroughDevicePointers) {
  TITAN_REQUIRE_CUDA();
  const int64_t rows = 45, vocab = 150;
  const Problem p = make_problem(rows, 24, vocab, DType::f32, DType::i64, 23);
  ops::CrossEntropyOptions loss = loss_variants()[3].options;
  loss.softcap = 2.0f;

  const Tensor logits = ops::matmul(p.hidden, p.weight.transpose(0, 1));
  const ops::CrossEntropyOutput whole = ops::cross_entropy(logits, p.targets, loss);
  const std::vector<float> logit_values = logits.to_floats();
  const std::vector<int64_t> target_ids = p.targets.to_ints();
  std::vector<float> target_logit(static_cast<size_t>(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = target_ids[static_cast<size_t>(r)];
    if (t == kIgnore) continue;
    const float x = logit_values[static_cast<size_t>(r * vocab + t)];
    target_logit[static_cast<size_t>(r)] = loss.softcap * std::tanh(x / loss.softcap);
  }
  const Tensor whole_lse = on_cuda(whole.lse), whole_target = on_cuda(Tensor::from_floats(target_logit, {rows}));

  for (int64_t vocab_chunk : {0, 16}) {
    SCOPED_TRACE("vocab_chunk " + std::to_string(vocab_chunk));
    const auto expected = ops::fused_linear_cross_entropy(p.hidden, p.weight, p.targets, fused_options(loss, 7, 16));
    std::vector<float> grad_hidden_sum(static_cast<size_t>(p.hidden.numel()), 0.0f);
    for (const auto& [begin, size] : {std::pair<int64_t, int64_t>{0, 70}, {70, 80}}) {
      ops::FusedCrossEntropyOptions options = fused_options(loss, 7, vocab_chunk);
      options.vocab_offset = begin;
      options.vocab_size = vocab;
      int64_t next_row = 0;
      bool device_pointers = true;
      options.combine = [&](float* lse, float* target, int64_t chunk_rows) {
        cudaPointerAttributes attributes{};
        device_pointers = device_pointers && cudaPointerGetAttributes(&attributes, lse) == cudaSuccess &&
                          attributes.type == cudaMemoryTypeDevice;
        const cudaStream_t stream = ops::cuda::current_stream();
        const size_t bytes = static_cast<size_t>(chunk_rows) * sizeof(float);
        ASSERT_EQ(cudaMemcpyAsync(lse, whole_lse.data<float>() + next_row, bytes, cudaMemcpyDeviceToDevice, stream),
                  cudaSuccess);
        ASSERT_EQ(
            cudaMemcpyAsync(target, whole_target.data<float>() + next_row, bytes, cudaMemcpyDeviceToDevice, stream),
            cudaSuccess);
        next_row += chunk_rows;
      };
      const Tensor shard = p.weight.narrow(0, begin, size).contiguous();
      const auto out = ops::fused_linear_cross_entropy(on_cuda(p.hidden), on_cuda(shard), on_cuda(p.targets), options);
      EXPECT_TRUE(device_pointers);
      EXPECT_EQ(next_row, rows);
      EXPECT_EQ(out.counted_tokens, expected.counted_tokens);
      EXPECT_TRUE(close_at(out.loss, expected.loss, DType::f32)) << "loss, shard at " << begin;
      EXPECT_TRUE(close_at(out.grad_weight, expected.grad_weight.narrow(0, begin, size).contiguous(), DType::f32))
          << "grad_weight, shard at " << begin;
      const std::vector<float> part = on_cpu(out.grad_hidden).to_floats();
      for (size_t i = 0; i < part.size(); ++i) grad_hidden_sum[i] += part[i];
    }
    EXPECT_TRUE(close_at(Tensor::from_floats(grad_hidden_sum, p.hidden.shape()), expected.grad_hidden, DType::f32))
        << "grad_hidden summed over the shards";
  }
}
#endif

// The point of the fused path: beyond its inputs and outputs it holds one
// token_chunk x vocab_chunk f32 tile (its own gradient in f32; bf16 adds the
// bf16 gradient tile and a [token_chunk, D] f32 grad_hidden accumulator),
// plus 12 bytes per row (target columns, row losses) and 16 per chunk row
// (running max and sum, target logit, lse). cuBLASLt's workspace is not the
// tensor allocator's.
TEST(CudaFusedCrossEntropy, MemoryIsOneTile) {
  TITAN_REQUIRE_CUDA();
  const int64_t rows = 4096, vocab = 32768, dim = 64, token_chunk = 1024, vocab_chunk = 8192;
  Allocator& allocator = allocator_for(DeviceType::cuda);
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Problem p = make_problem(rows, dim, vocab, dtype, DType::i64, 29);
    const Tensor hidden = on_cuda(p.hidden), weight = on_cuda(p.weight), targets = on_cuda(p.targets);
    const ops::FusedCrossEntropyOptions options = fused_options({}, token_chunk, vocab_chunk);
    const int64_t live_before = allocator.stats().live_bytes;
    allocator.reset_peak();
    const auto out = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
    const auto outputs = static_cast<int64_t>(out.loss.nbytes() + out.grad_hidden.nbytes() + out.grad_weight.nbytes());
    const int64_t scratch = allocator.stats().peak_bytes - live_before - outputs;
    const int64_t tile = token_chunk * vocab_chunk;
    const int64_t tiles = dtype == DType::f32 ? tile * 4 : tile * 6 + token_chunk * dim * 4;
    const int64_t bound = tiles + 12 * rows + 16 * token_chunk;
    EXPECT_LE(scratch, bound + bound / 100 + 4096);  // allocator rounding and 0-d tensors
    EXPECT_GE(scratch, tile * 4);
    EXPECT_LT(scratch, rows * vocab * 4 / 8);
  }
}

}  // namespace cross_entropy_test
}  // namespace titan::testing
