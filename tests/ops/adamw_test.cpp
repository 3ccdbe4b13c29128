// Fused AdamW against torch.optim.AdamW over several steps with the same
// gradients, and gradient clipping against its definition.
//
// CUDA fused AdamW against the CPU backend over several steps, with tensors of
// every dtype combination (and an empty one) updated in one call, sizes not
// multiples of the 16384-element chunk.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/ops/adamw.h"
#include "titan/ops/reduction.h"

namespace titan {
namespace adamw_test {

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

}  // namespace adamw_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace adamw_test {

struct Group {
  std::vector<Tensor> params, grads, exp_avg, exp_avg_sq;
};

struct Layout {
  int64_t numel;
  DType param, grad, state;
};

const std::vector<Layout> kLayouts{
    {1, DType::f32, DType::f32, DType::f32},       {100, DType::f32, DType::f32, DType::f32},
    {40000, DType::f32, DType::f32, DType::f32},   {16385, DType::f32, DType::bf16, DType::f32},
    {20000, DType::f32, DType::bf16, DType::bf16}, {0, DType::f32, DType::f32, DType::f32},
    {33000, DType::bf16, DType::bf16, DType::f32}, {777, DType::bf16, DType::f32, DType::bf16},
    {5000, DType::f32, DType::f32, DType::bf16},   {3, DType::bf16, DType::bf16, DType::bf16},
};

TEST(CudaAdamW, MatchesCpuOverSeveralSteps) {
  TITAN_REQUIRE_CUDA();
  ops::AdamWHyper hyper;
  hyper.lr = 1e-2f;  // large steps: a wrong term moves parameters far beyond the tolerances below
  hyper.weight_decay = 0.1f;
  const int steps = 5;
  Group cpu, gpu;
  for (size_t i = 0; i < kLayouts.size(); ++i) {
    const Layout& l = kLayouts[i];
    cpu.params.push_back(random_cpu({l.numel}, l.param, 10 + i));
    cpu.exp_avg.push_back(Tensor::zeros({l.numel}, l.state));
    cpu.exp_avg_sq.push_back(Tensor::zeros({l.numel}, l.state));
    gpu.params.push_back(on_cuda(cpu.params.back()));
    gpu.exp_avg.push_back(on_cuda(cpu.exp_avg.back()));
    gpu.exp_avg_sq.push_back(on_cuda(cpu.exp_avg_sq.back()));
  }
  for (int step = 1; step <= steps; ++step) {
    cpu.grads.clear();
    gpu.grads.clear();
    for (size_t i = 0; i < kLayouts.size(); ++i) {
      // Gradients of mixed scale, some near zero, so sqrt(v) and eps both matter.
      cpu.grads.push_back(random_cpu({kLayouts[i].numel}, kLayouts[i].grad, 1000 * step + i, -1e-3, 1.0));
      gpu.grads.push_back(on_cuda(cpu.grads.back()));
    }
    hyper.step = step;
    ops::adamw_step(cpu.params, cpu.grads, cpu.exp_avg, cpu.exp_avg_sq, hyper);
    ops::adamw_step(gpu.params, gpu.grads, gpu.exp_avg, gpu.exp_avg_sq, hyper);
  }
  const double max_update = static_cast<double>(hyper.lr) * steps;
  for (size_t i = 0; i < kLayouts.size(); ++i) {
    const Layout& l = kLayouts[i];
    SCOPED_TRACE("tensor " + std::to_string(i) + ": param " + dtype_name(l.param) + ", grad " + dtype_name(l.grad) +
                 ", state " + dtype_name(l.state));
    const Tensor p = on_cpu(gpu.params[i]), m = on_cpu(gpu.exp_avg[i]), v = on_cpu(gpu.exp_avg_sq[i]);
    if (l.state == DType::f32) {
      // The same f32 formulas; the compilers may fuse different multiply-adds,
      // so values differ by a few ulps per step: ~1e-7 relative for moments,
      // and for |p| <= 1 an absolute 1e-6 after 5 steps, 50000x below the
      // total update (a wrong term costs ~1e-3).
      EXPECT_TRUE(all_close(m, cpu.exp_avg[i], 1e-8, 1e-5));
      EXPECT_TRUE(all_close(v, cpu.exp_avg_sq[i], 1e-10, 1e-5));
    } else {
      // A few-ulp f32 difference can round a moment to the neighbouring bf16
      // value: 2^-8 relative, within tolerance_for(bf16)'s 2%.
      const auto tol_m = tolerance_for(DType::bf16, cpu.exp_avg[i]);
      const auto tol_v = tolerance_for(DType::bf16, cpu.exp_avg_sq[i]);
      EXPECT_TRUE(all_close(m, cpu.exp_avg[i], tol_m.atol, tol_m.rtol));
      EXPECT_TRUE(all_close(v, cpu.exp_avg_sq[i], tol_v.atol, tol_v.rtol));
    }
    if (l.param == DType::bf16) {
      // One bf16 rounding flip (2^-8 relative) carried through the steps.
      const auto tol = tolerance_for(DType::bf16, cpu.params[i]);
      EXPECT_TRUE(all_close(p, cpu.params[i], tol.atol, tol.rtol));
    } else if (l.state == DType::bf16) {
      // bf16 moments perturb each update by ~2^-8 of lr at worst.
      EXPECT_TRUE(all_close(p, cpu.params[i], 0.01 * max_update, 1e-6));
    } else {
      EXPECT_TRUE(all_close(p, cpu.params[i], 1e-6, 1e-6));
    }
  }
}

TEST(CudaAdamW, RejectsMomentsOfDifferentDtypes) {
  TITAN_REQUIRE_CUDA();
  const std::vector<Tensor> params{on_cuda(Tensor::zeros({4}))}, grads{on_cuda(Tensor::zeros({4}))};
  const std::vector<Tensor> m{on_cuda(Tensor::zeros({4}))}, v{on_cuda(Tensor::zeros({4}, DType::bf16))};
  EXPECT_THROW(ops::adamw_step(params, grads, m, v, {}), Error);
}

}  // namespace adamw_test
}  // namespace titan::testing
