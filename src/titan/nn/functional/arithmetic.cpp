// Differentiable elementwise arithmetic and reductions.
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"
#include "titan/core/copy.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduction.h"

namespace titan::F {

using autograd::record;

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = ops::add(a, b);
  record("AddBackward", {&a, &b}, {&y}, [](const auto& g) { return std::vector<Tensor>{g[0], g[0]}; });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = ops::sub(a, b);
  record("SubBackward", {&a, &b}, {&y}, [](const auto& g) {
    return std::vector<Tensor>{g[0], ops::scale(g[0], -1.0f)};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = ops::mul(a, b);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Tensor saved_a = need_b ? a.detach() : Tensor(), saved_b = need_a ? b.detach() : Tensor();
  record("MulBackward", {&a, &b}, {&y}, [=](const auto& g) {
    return std::vector<Tensor>{need_a ? ops::mul(g[0], saved_b) : Tensor(),
                               need_b ? ops::mul(g[0], saved_a) : Tensor()};
  });
  return y;
}

Tensor scale(const Tensor& x, float factor) {
  Tensor y = ops::scale(x, factor);
  record("ScaleBackward", {&x}, {&y},
         [factor](const auto& g) { return std::vector<Tensor>{ops::scale(g[0], factor)}; });
  return y;
}

Tensor sum(const Tensor& x) {
  Tensor y = ops::sum(x);
  const Shape shape = x.shape();
  const DType dtype = x.dtype();
  record("SumBackward", {&x}, {&y}, [shape, dtype](const auto& g) {
    // Broadcast on the device: reading the gradient on the host would stall the step.
    return std::vector<Tensor>{titan::cast(g[0], dtype).expand(shape).contiguous()};
  });
  return y;
}

Tensor mean(const Tensor& x) {
  Tensor y = ops::mean(x);
  const Shape shape = x.shape();
  const DType dtype = x.dtype();
  const double count = static_cast<double>(x.numel());
  record("MeanBackward", {&x}, {&y}, [shape, dtype, count](const auto& g) {
    const Tensor each = ops::scale(g[0], static_cast<float>(1.0 / count));
    return std::vector<Tensor>{titan::cast(each, dtype).expand(shape).contiguous()};
  });
  return y;
}

}  // namespace titan::F
