// Cross-entropy against the float64 PyTorch reference: the plain op forward
// and backward, and the fused linear cross-entropy over several chunkings, in
// f32 and bf16; the fused path against linear + cross_entropy through
// autograd; ignored rows, bad targets and shapes; the fused path's memory bound.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/allocator.h"
#include "titan/core/generator.h"
#include "titan/nn/functional.h"
#include "titan/ops/cpu/onednn/gemm.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/random.h"

namespace titan {
namespace {

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

}  // namespace
}  // namespace titan
