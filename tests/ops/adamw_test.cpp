// Fused AdamW against torch.optim.AdamW over several steps with the same
// gradients, and gradient clipping against its definition.
#include <gtest/gtest.h>

#include <cmath>

#include "support/reference.h"
#include "titan/ops/adamw.h"
#include "titan/ops/reduction.h"

namespace titan {
namespace {

using testing::ReferenceCase;

// f32 states: after 6 steps each parameter moved by at most 6 * lr; the
// per-step update is computed in f32, so differences stay at a few f32 ulps
// of the parameter (~1e-7 relative). bf16 states round m and v to 8 bits each
// step, which perturbs the update (not the parameter) by ~0.4% of lr.
TEST(AdamW, MatchesTorchAdamW) {
  ReferenceCase ref("adamw");
  ops::AdamWHyper hyper;
  hyper.lr = static_cast<float>(ref.meta_double("lr"));
  hyper.beta1 = static_cast<float>(ref.meta_double("beta1"));
  hyper.beta2 = static_cast<float>(ref.meta_double("beta2"));
  hyper.eps = static_cast<float>(ref.meta_double("eps"));
  hyper.weight_decay = static_cast<float>(ref.meta_double("weight_decay"));
  const int64_t steps = ref.meta_int("steps"), count = ref.meta_int("count");
  for (DType state_dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(state_dtype));
    std::vector<Tensor> params, exp_avg, exp_avg_sq;
    for (int64_t i = 0; i < count; ++i) {
      params.push_back(ref.get(fmt::format("param{}", i)));
      exp_avg.push_back(Tensor::zeros(params.back().shape(), state_dtype));
      exp_avg_sq.push_back(Tensor::zeros(params.back().shape(), state_dtype));
    }
    for (int64_t step = 0; step < steps; ++step) {
      std::vector<Tensor> grads;
      for (int64_t i = 0; i < count; ++i) grads.push_back(ref.get(fmt::format("grad{}_step{}", i, step)));
      hyper.step = step + 1;
      ops::adamw_step(params, grads, exp_avg, exp_avg_sq, hyper);
    }
    const double update_scale = hyper.lr * static_cast<double>(steps);
    for (int64_t i = 0; i < count; ++i) {
      const Tensor expected = ref.get(fmt::format("final{}", i));
      if (state_dtype == DType::f32) {
        EXPECT_TRUE(testing::all_close(params[i], expected, 1e-6, 1e-6));
        EXPECT_TRUE(testing::all_close(exp_avg[i], ref.get(fmt::format("exp_avg{}", i)), 1e-7, 1e-5));
        EXPECT_TRUE(testing::all_close(exp_avg_sq[i], ref.get(fmt::format("exp_avg_sq{}", i)), 1e-8, 1e-5));
      } else {
        EXPECT_TRUE(testing::all_close(params[i], expected, 0.02 * update_scale, 1e-6));
      }
    }
  }
}

TEST(AdamW, RejectsMismatchedLists) {
  std::vector<Tensor> params{Tensor::zeros({3})}, grads{Tensor::zeros({4})};
  std::vector<Tensor> m{Tensor::zeros({3})}, v{Tensor::zeros({3})};
  EXPECT_THROW(ops::adamw_step(params, grads, m, v, {}), Error);
  EXPECT_THROW(ops::adamw_step(params, {}, m, v, {}), Error);
}

TEST(ClipGradNorm, ScalesOnlyAboveMax) {
  std::vector<Tensor> grads{Tensor::full({4}, 3.0), Tensor::full({1}, 4.0)};  // norm sqrt(36 + 16) = sqrt(52)
  const double norm = ops::clip_grad_norm_(grads, 1.0);
  EXPECT_NEAR(norm, std::sqrt(52.0), 1e-5);
  EXPECT_NEAR(ops::global_l2_norm(grads).item(), 1.0, 1e-5);
  const double again = ops::clip_grad_norm_(grads, 10.0);  // below max: unchanged
  EXPECT_NEAR(again, 1.0, 1e-5);
  EXPECT_NEAR(grads[1].to_floats()[0], 4.0 / std::sqrt(52.0) * (1.0 / (1.0 + 1e-6 * 0)), 1e-5);
}

}  // namespace
}  // namespace titan
