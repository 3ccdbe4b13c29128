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
namespace {

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

}  // namespace
}  // namespace titan::parallel
