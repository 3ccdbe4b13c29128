#include "titan/distributed/grad_norm.h"

#include "titan/ops/elementwise.h"
#include "titan/ops/reduction.h"

namespace titan::distributed {

Tensor grad_sum_squares(std::span<const Tensor> grads, const std::vector<ProcessGroup*>& groups, Device device) {
  Tensor total;
  if (grads.empty()) {
    total = Tensor::zeros({1}, DType::f32, device);
  } else {
    // The product of two f32 values rounds once: the same bits as squaring in double and rounding.
    const Tensor norm = ops::global_l2_norm(grads).reshape({1});
    total = ops::mul(norm, norm);
  }
  for (ProcessGroup* group : groups) {
    if (group->size() > 1) group->all_reduce(total, ReduceOp::sum)->wait();
  }
  return total;
}

}  // namespace titan::distributed
