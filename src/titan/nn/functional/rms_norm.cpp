// The autograd function of RMSNorm (ops/rms_norm.h); backward reuses the
// per-row rstd the forward saved.
#include "titan/ops/rms_norm.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  ops::RmsNormOutput out = ops::rms_norm(x, weight, eps);
  const Tensor saved_x = x.detach(), saved_w = weight.detach(), rstd = out.rstd;
  record("RmsNormBackward", {&x, &weight}, {&out.y}, [=](const auto& g) {
    ops::RmsNormGrads grads = ops::rms_norm_backward(g[0], saved_x, saved_w, rstd);
    return std::vector<Tensor>{grads.grad_x, grads.grad_weight};
  });
  return out.y;
}

}  // namespace titan::F
