// CUDA cross-entropy (forward and backward) against the CPU backend on the
// same logits: f32 and bf16, i32 and i64 targets, ignored rows, softcap,
// z-loss, mean and sum, vocabularies not a multiple of the block.
#include <vector>

#include "cuda_test_support.h"
#include "support/expect_error.h"
#include "titan/ops/cross_entropy.h"

namespace titan::testing {
namespace {

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

}  // namespace
}  // namespace titan::testing
