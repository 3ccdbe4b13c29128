// Autograd function of Gated DeltaNet's short convolution (ops/causal_conv1d.h).
#include "titan/ops/causal_conv1d.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

Tensor causal_conv1d_silu(const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  Tensor y = ops::causal_conv1d_silu(x, weight, document_ids);
  const Tensor sx = x.detach(), sw = weight.detach();
  autograd::record("CausalConv1dSiluBackward", {&x, &weight}, {&y}, [=](const auto& g) {
    auto [dx, dw] = ops::causal_conv1d_silu_backward(g[0], sx, sw, document_ids);
    return std::vector<Tensor>{dx, dw};
  });
  return y;
}

}  // namespace titan::F
