// Tensor parallelism's split modules on every rank of the job, each against
// the whole module computed by each rank alone.
//
// A column-parallel Linear with a bias (Qwen 2's q/k/v under tensor
// parallelism) on every rank of the job, as the decoder plan runs it: the
// sequence-split input gathered, weight and bias split along the output rows,
// against the whole Linear computed by each rank alone. Each rank's output
// columns, its input gradient (reduce-scattered back to its sequence part)
// and its weight and bias gradients must be the matching parts of the whole.
#include <gtest/gtest.h>

#include "distributed/mpi_test_support.h"
#include "support/gradcheck.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/nn/linear.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::parallel {
namespace tensor_parallel_test {

using comm::testing::world;

struct LinearRun {
  Tensor y, grad_x, grad_weight, grad_bias;
};

// A Linear with the given weight and bias (copied), run on x with upstream gradient `up`.
LinearRun run_linear(const Tensor& weight, const Tensor& bias, const Tensor& x, const Tensor& up,
                     const std::function<void(nn::Linear&)>& split,
                     const std::function<Tensor(const Tensor&)>& gather) {
  auto linear = nn::LinearConfig{.in_features = weight.size(1), .out_features = weight.size(0), .bias = true}.build();
  titan::copy_(linear->weight->data, weight);
  titan::copy_(linear->bias->data, bias);
  split(*linear);
  Tensor input = x.clone();
  input.set_requires_grad(true);
  const Tensor y = linear->forward(gather(input));
  autograd::backward({F::sum(F::mul(y, up))});
  return {y.detach(), input.grad(), linear->weight->data.grad(), linear->bias->data.grad()};
}

TEST(TensorParallel, ColumnParallelLinearWithBias) {
  const std::shared_ptr<comm::ProcessGroup> group = comm::World::instance().group();
  const int64_t ranks = group->size(), rank = group->rank();
  const int64_t batch = 2, seq_part = 3, seq = seq_part * ranks, in = 12, out_part = 5, out = out_part * ranks;
  // Every rank draws the same whole tensors.
  const auto draw = [](const Shape& shape, uint64_t seed) { return titan::testing::random_leaf(shape, seed).detach(); };
  const Tensor weight = draw({out, in}, 1), bias = draw({out}, 2), x = draw({batch, seq, in}, 3),
               up = draw({batch, seq, out}, 4);

  const LinearRun whole = run_linear(
      weight, bias, x, up, [](nn::Linear&) {}, [](const Tensor& t) { return t; });
  const LinearRun split = run_linear(
      weight, bias, x.narrow(1, rank * seq_part, seq_part).contiguous(), up.narrow(2, rank * out_part, out_part),
      [&](nn::Linear& linear) {
        shard_parameter("wq", *linear.weight, 0, *group);
        shard_parameter("wq.bias", *linear.bias, 0, *group);
        // The bias's place in the whole tensor, for checkpoints.
        EXPECT_EQ(linear.bias->layout.global_shape, (Shape{out}));
        EXPECT_EQ(linear.bias->layout.offsets, (Shape{rank * out_part}));
        EXPECT_EQ(linear.bias->tensor_parallel_dim, 0);
      },
      [&](const Tensor& t) { return gather_sequence(t, group); });

  // The same products and sums, only partitioned differently: f32 rounding apart.
  const auto expect_part = [&](const char* what, const Tensor& actual, const Tensor& expected) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(actual.defined());
    ASSERT_EQ(actual.shape(), expected.shape());
    const double rtol = 1e-5, atol = rtol * titan::testing::max_abs(expected);
    EXPECT_TRUE(titan::testing::all_close(actual, expected.contiguous(), atol, rtol));
  };
  expect_part("y", split.y, whole.y.narrow(2, rank * out_part, out_part));
  expect_part("grad_x", split.grad_x, whole.grad_x.narrow(1, rank * seq_part, seq_part));
  expect_part("grad_weight", split.grad_weight, whole.grad_weight.narrow(0, rank * out_part, out_part));
  expect_part("grad_bias", split.grad_bias, whole.grad_bias.narrow(0, rank * out_part, out_part));
}

// The embedding table split by vocabulary rows (TorchTitan's rowwise
// embedding): every rank looks up the whole sequence in its rows and keeps
// its part of the sequence. Its output must be that part of the whole
// lookup, and its weight gradient its rows of the whole gradient, with ids on
// both sides of every boundary between ranks' rows and repeated ids (whose
// gradients add).
TEST(TensorParallel, VocabParallelEmbeddingIsTheWholeLookupsSequencePart) {
  const std::shared_ptr<comm::ProcessGroup> group = comm::World::instance().group();
  const int64_t ranks = group->size(), rank = group->rank();
  const int64_t rows = 3, vocab = rows * ranks, dim = 4, batch = 2, seq_part = vocab, seq = seq_part * ranks;
  const Tensor table = titan::testing::random_leaf({vocab, dim}, 5).detach();
  const Tensor up = titan::testing::random_leaf({batch, seq, dim}, 6).detach();
  Tensor ids = Tensor::empty({batch, seq}, DType::i64);
  for (int64_t i = 0; i < batch * seq; ++i) ids.data<int64_t>()[i] = (i * 7 + i / 5) % vocab;

  Tensor whole_weight = table.clone();
  whole_weight.set_requires_grad(true);
  const Tensor whole = F::embedding(whole_weight, ids);
  autograd::backward({F::sum(F::mul(whole, up))});

  Tensor local_weight = table.narrow(0, rank * rows, rows).contiguous().clone();
  local_weight.set_requires_grad(true);
  const Tensor part = vocab_parallel_embedding(local_weight, ids, group);
  autograd::backward({F::sum(F::mul(part, up.narrow(1, rank * seq_part, seq_part).contiguous()))});

  // A lookup is a copy and its partial sums add zeros: exact. The gradient
  // rows add the same terms in the same (token) order: exact too.
  EXPECT_TRUE(titan::testing::all_close(part, whole.narrow(1, rank * seq_part, seq_part).contiguous(), 0.0, 0.0));
  EXPECT_TRUE(titan::testing::all_close(local_weight.grad(),
                                        whole_weight.grad().narrow(0, rank * rows, rows).contiguous(), 0.0, 0.0));
}

}  // namespace tensor_parallel_test
}  // namespace titan::parallel
