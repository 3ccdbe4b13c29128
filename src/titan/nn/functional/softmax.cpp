// The autograd function of the softmax over the last dim (ops/softmax.h);
// backward needs only the output.
#include "titan/ops/softmax.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

Tensor softmax(const Tensor& x) {
  Tensor y = ops::softmax(x);
  const Tensor saved_y = y.detach();
  record("SoftmaxBackward", {&x}, {&y},
         [saved_y](const auto& g) { return std::vector<Tensor>{ops::softmax_backward(g[0], saved_y)}; });
  return y;
}

}  // namespace titan::F
