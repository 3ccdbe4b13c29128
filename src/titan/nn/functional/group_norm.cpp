// F::group_norm (ops/group_norm.h): forward only, refused where autograd
// would record it (see F::conv2d).
#include "titan/ops/group_norm.h"
#include "titan/nn/functional.h"

namespace titan::F {

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps) {
  refuse_forward_only_under_grad("F::group_norm", {&x, &weight, &bias});
  return ops::group_norm(x, groups, weight, bias, eps);
}

}  // namespace titan::F
