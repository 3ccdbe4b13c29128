// Autograd function of Gated DeltaNet's gates (ops/gdn_gates.h).
#include "titan/ops/gdn_gates.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

std::pair<Tensor, Tensor> gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias) {
  ops::GdnGates out = ops::gdn_gates(a, b, a_log, dt_bias);
  const Tensor sa = a.detach(), sb = b.detach(), sal = a_log.detach(), sdt = dt_bias.detach();
  autograd::record("GdnGatesBackward", {&a, &b, &a_log, &dt_bias}, {&out.g, &out.beta}, [=](const auto& g) {
    ops::GdnGateGrads d = ops::gdn_gates_backward(g[0], g[1], sa, sb, sal, sdt);
    return std::vector<Tensor>{d.grad_a, d.grad_b, d.grad_a_log, d.grad_dt_bias};
  });
  return {out.g, out.beta};
}

}  // namespace titan::F
