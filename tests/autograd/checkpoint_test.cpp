// Activation checkpointing: the recomputed backward gives the same gradients
// as the stored one, bitwise (same kernels, same order), while holding less
// memory between forward and backward.
#include <gtest/gtest.h>

#include "support/gradcheck.h"
#include "titan/autograd/checkpoint.h"
#include "titan/autograd/engine.h"
#include "titan/core/allocator.h"
#include "titan/nn/functional.h"

namespace titan {
namespace checkpoint_test {

using testing::random_leaf;

// A small MLP block with weights captured by the closure (as module parameters are).
struct Block {
  Tensor w1 = random_leaf({64, 32}, 1, 0.2), w2 = random_leaf({32, 64}, 2, 0.2);
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    Tensor h = in[0];
    for (int i = 0; i < 4; ++i) h = F::add(h, F::linear(F::silu(F::linear(h, w1)), w2));
    return {h};
  }
};

TEST(Checkpoint, SameGradientsAsStoredActivations) {
  Block block;
  Tensor x1 = random_leaf({16, 32}, 3), x2 = x1.detach().clone();
  x2.set_requires_grad(true);
  autograd::backward({F::sum(block({x1})[0])});
  const std::vector<float> w1_plain = block.w1.grad().to_floats(), w2_plain = block.w2.grad().to_floats();
  block.w1.set_grad(Tensor());
  block.w2.set_grad(Tensor());
  const Tensor out = autograd::checkpoint(block, {x2})[0];
  EXPECT_TRUE(out.requires_grad());
  autograd::backward({F::sum(out)});
  EXPECT_EQ(x1.grad().to_floats(), x2.grad().to_floats());
  EXPECT_EQ(block.w1.grad().to_floats(), w1_plain);
  EXPECT_EQ(block.w2.grad().to_floats(), w2_plain);
}

TEST(Checkpoint, HoldsLessMemoryUntilBackward) {
  Block block;
  Tensor x = random_leaf({512, 32}, 4);
  Allocator& allocator = allocator_for(DeviceType::cpu);
  const int64_t before = allocator.stats().live_bytes;
  Tensor stored = F::sum(block({x})[0]);
  const int64_t stored_bytes = allocator.stats().live_bytes - before;
  stored = Tensor();  // drop the graph
  const int64_t between = allocator.stats().live_bytes;
  Tensor recomputed = F::sum(autograd::checkpoint(block, {x})[0]);
  const int64_t checkpoint_bytes = allocator.stats().live_bytes - between;
  // Stored: per layer the [512, 64] hidden pre-activation and more; checkpointed: the output only.
  EXPECT_LT(checkpoint_bytes * 4, stored_bytes) << checkpoint_bytes << " vs " << stored_bytes;
  autograd::backward({recomputed});
  EXPECT_TRUE(x.grad().defined());
}

// Per-op selective checkpointing (TorchTitan's "op" policy): the same
// gradients, bitwise; between forward and backward the block holds its
// output and exactly the kept matmul outputs: the 1st, 3rd, 5th and 7th of
// its eight linears (the [512, 64] outputs of w1), or, with w1's shape forced
// to recompute, the 1st and 3rd of the four w2 linears ([512, 32]).
TEST(Checkpoint, SelectiveOpsKeepEveryOtherMatmul) {
  Block block;
  Tensor x = random_leaf({512, 32}, 4);
  autograd::backward({F::sum(block({x})[0])});
  const std::vector<float> plain = block.w1.grad().to_floats();
  Allocator& allocator = allocator_for(DeviceType::cpu);
  const int64_t output_bytes = 512 * 32 * 4;
  const struct {
    autograd::SavedOpPolicy policy;
    int64_t kept_bytes;
  } cases[] = {{{}, 4 * 512 * 64 * 4}, {{{{64, 32}}}, 2 * 512 * 32 * 4}};
  for (const auto& c : cases) {
    block.w1.set_grad(Tensor());
    Tensor input = x.detach();
    input.set_requires_grad(true);
    const int64_t before = allocator.stats().live_bytes;
    Tensor out = autograd::checkpoint(block, {input}, &c.policy)[0];
    EXPECT_EQ(allocator.stats().live_bytes - before, output_bytes + c.kept_bytes);
    autograd::backward({F::sum(out)});
    EXPECT_EQ(block.w1.grad().to_floats(), plain);
  }
}

// What the recompute computes: only the ops the forward did not keep.
TEST(Checkpoint, SelectiveOpsRecomputeOnlyWhatWasNotKept) {
  int computed = 0;
  const Tensor w = random_leaf({8, 8}, 5);
  const auto op = [&](autograd::SavedOpKind kind, const Shape& shape, const Tensor& in) {
    return autograd::run_saved_op(kind, shape, [&] {
      ++computed;
      return std::vector<Tensor>{F::linear(in, w)};
    })[0];
  };
  const autograd::CheckpointFunction body = [&](const std::vector<Tensor>& in) {
    Tensor h = in[0];
    for (int i = 0; i < 4; ++i) h = op(autograd::SavedOpKind::matmul, {8, 8}, h);  // kept: 1st and 3rd
    h = op(autograd::SavedOpKind::matmul, {4, 8}, h);                              // forced: recomputed, not counted
    h = op(autograd::SavedOpKind::attention, {}, h);                               // kept
    return std::vector<Tensor>{h};
  };
  const autograd::SavedOpPolicy policy{{{4, 8}}};
  Tensor out = autograd::checkpoint(body, {random_leaf({3, 8}, 6)}, &policy)[0];
  EXPECT_EQ(computed, 6);
  computed = 0;
  autograd::backward({F::sum(out)});
  EXPECT_EQ(computed, 3);  // the 2nd and 4th matmul and the forced one
}

TEST(Checkpoint, PassesThroughWithoutGrad) {
  Block block;
  Tensor x = Tensor::zeros({2, 32});
  const Tensor out = autograd::checkpoint(block, {x})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 32}));
}

TEST(Checkpoint, GradcheckThroughRecompute) {
  Block block;
  EXPECT_TRUE(testing::check_gradients([&](const auto& in) { return autograd::checkpoint(block, {in[0]})[0]; },
                                       {random_leaf({3, 32}, 5)}));
}

}  // namespace checkpoint_test
}  // namespace titan
