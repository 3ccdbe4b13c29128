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
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "support/expect_error.h"
#include "titan/core/allocator.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/gemm.h"

#if defined(TITAN_WITH_CUDA)
#include <cuda_runtime.h>

#include "titan/ops/cuda/stream.h"
#endif

namespace titan::testing {
namespace {

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

}  // namespace
}  // namespace titan::testing
