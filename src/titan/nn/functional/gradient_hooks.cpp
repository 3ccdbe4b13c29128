// Autograd functions that run no op: they pass y through and act on the
// gradient in backward (observe it, or add a gradient for another tensor).
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

Tensor observe_gradient(const Tensor& y, std::function<void(const Tensor&)> observe) {
  Tensor out = y.detach();
  record("ObserveGradient", {&y}, {&out}, [observe = std::move(observe)](const auto& g) {
    observe(g[0]);
    return std::vector<Tensor>{g[0]};
  });
  return out;
}

Tensor with_auxiliary_gradient(const Tensor& y, const Tensor& p, std::function<Tensor()> gradient) {
  Tensor out = y.detach();
  record("AuxiliaryGradient", {&y, &p}, {&out}, [gradient = std::move(gradient)](const auto& g) {
    return std::vector<Tensor>{g[0], gradient()};
  });
  return out;
}

}  // namespace titan::F
