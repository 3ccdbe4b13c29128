// F::conv2d (ops/conv2d.h): forward only. Recording no backward would hand a
// caller that expects gradients zeros without a word, so a call that autograd
// would record is refused instead.
#include "titan/ops/conv2d.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/nn/functional.h"

namespace titan::F {

void refuse_forward_only_under_grad(const char* op, std::initializer_list<const Tensor*> inputs) {
  if (!autograd::grad_enabled()) return;
  for (const Tensor* t : inputs) {
    TITAN_CHECK(!t->defined() || !t->requires_grad(),
                "{}: forward only (it has no backward yet), but an input requires grad; call it under "
                "autograd::NoGradGuard",
                op);
  }
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ops::Conv2dOptions& options) {
  refuse_forward_only_under_grad("F::conv2d", {&x, &weight, &bias});
  return ops::conv2d(x, weight, bias, options);
}

}  // namespace titan::F
