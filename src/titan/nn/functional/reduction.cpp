// Autograd functions of the reductions (ops/reduction.h) to a 0-d f32 tensor:
// their gradients broadcast back on the device.
#include "titan/ops/reduction.h"
#include "titan/autograd/function_node.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"

namespace titan::F {

using autograd::record;

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
