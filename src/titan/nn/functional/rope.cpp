// The autograd function of the rotary embedding (ops/rope.h): its backward
// is the inverse rotation of the gradient.
#include "titan/ops/rope.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

Tensor rope(const Tensor& x, const ops::RopeTable& table, const Tensor& positions, ops::RopeStyle style) {
  Tensor y = ops::rope(x, table, positions, style);
  const Tensor saved_positions = positions.defined() ? positions.detach() : Tensor();
  record("RopeBackward", {&x}, {&y}, [=](const auto& g) {
    return std::vector<Tensor>{ops::rope(g[0], table, saved_positions, style, /*inverse=*/true)};
  });
  return y;
}

}  // namespace titan::F
