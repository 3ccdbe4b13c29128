// The backward engine: accumulation for reused tensors, grad mode, hooks,
// retained graphs and errors. Expected gradients are worked out by hand.
#include <gtest/gtest.h>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"

namespace titan {
namespace engine_test {

Tensor leaf(std::vector<float> values) {
  Tensor t = Tensor::from_floats(values, {static_cast<int64_t>(values.size())});
  t.set_requires_grad(true);
  return t;
}

TEST(Engine, ReusedTensorAccumulates) {
  Tensor x = leaf({1, 2, 3});
  // y = sum(x * x + x) -> dy/dx = 2x + 1
  Tensor y = F::sum(F::add(F::mul(x, x), x));
  autograd::backward({y});
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{3, 5, 7}));
}

TEST(Engine, DiamondAndAccumulationAcrossBackwards) {
  Tensor x = leaf({2});
  Tensor a = F::scale(x, 3.0f), b = F::mul(x, x);
  Tensor y = F::sum(F::mul(a, b));  // 3 x^3 -> 9 x^2 = 36
  autograd::backward({y});
  EXPECT_EQ(x.grad().to_floats()[0], 36.0f);
  Tensor z = F::sum(F::scale(x, 2.0f));
  autograd::backward({z});  // gradients accumulate into .grad like PyTorch
  EXPECT_EQ(x.grad().to_floats()[0], 38.0f);
}

TEST(Engine, NoGradRecordsNothing) {
  Tensor x = leaf({1, 2});
  Tensor y;
  {
    autograd::NoGradGuard guard;
    y = F::mul(x, x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_THROW(autograd::backward({F::sum(y)}), Error);
}

TEST(Engine, OnlyInputsThatNeedGradientsGetThem) {
  Tensor x = leaf({1, 2});
  Tensor c = Tensor::from_floats(std::vector<float>{5, 7}, {2});
  autograd::backward({F::sum(F::mul(x, c))});
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{5, 7}));
  EXPECT_FALSE(c.grad().defined());
}

TEST(Engine, TensorHooksSeeAndReplaceGradients) {
  Tensor x = leaf({1, 2});
  Tensor h = F::scale(x, 2.0f);
  std::vector<float> seen;
  autograd::register_hook(h, [&](const Tensor& g) {
    seen = g.to_floats();
    return ops::scale(g, 10.0f);
  });
  autograd::register_hook(x, [](const Tensor& g) { return ops::scale(g, 0.5f); });  // leaf hook, before accumulation
  autograd::backward({F::sum(h)});
  EXPECT_EQ(seen, (std::vector<float>{1, 1}));
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{10, 10}));  // 1 * 10 * 2 * 0.5
}

TEST(Engine, PostAccumulateHookSeesSummedGradientOnce) {
  Tensor x = leaf({1});
  int calls = 0;
  float seen = 0;
  autograd::register_post_accumulate_grad_hook(x, [&](const Tensor& t) {
    ++calls;
    seen = t.grad().to_floats()[0];
  });
  // x is used twice; the engine sums both paths before the leaf sees them.
  autograd::backward({F::sum(F::add(F::scale(x, 2.0f), F::scale(x, 3.0f)))});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, 5.0f);
}

TEST(Engine, RetainGraph) {
  Tensor x = leaf({3});
  Tensor y = F::sum(F::mul(x, x));
  autograd::backward({y}, {}, /*retain_graph=*/true);
  autograd::backward({y});
  EXPECT_EQ(x.grad().to_floats()[0], 12.0f);
  EXPECT_THROW(autograd::backward({y}), Error);  // saved tensors were released
}

TEST(Engine, RootChecks) {
  Tensor x = leaf({1, 2});
  EXPECT_THROW(autograd::backward({F::scale(x, 2.0f)}), Error);  // non-scalar root needs a gradient
  EXPECT_THROW(autograd::backward({F::scale(x, 2.0f)}, {Tensor::zeros({3})}), Error);
  EXPECT_THROW(autograd::backward({Tensor::zeros({1})}), Error);
  EXPECT_THROW(Tensor::zeros({2}, DType::i64).set_requires_grad(true), Error);
}

TEST(Engine, CastRoutesGradientToMasterDtype) {
  Tensor x = leaf({1.5f, -2.0f});
  Tensor y = F::sum(F::mul(F::cast(x, DType::bf16), F::cast(x, DType::bf16)));
  autograd::backward({y});
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{3.0f, -4.0f}));
}

}  // namespace engine_test
}  // namespace titan
