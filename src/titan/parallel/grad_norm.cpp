#include "titan/parallel/grad_norm.h"

#include "titan/ops/elementwise.h"
#include "titan/ops/reduction.h"

namespace titan::parallel {

Tensor grad_sum_squares(std::span<const Tensor> grads, const std::vector<comm::ProcessGroup*>& groups, Device device) {
  Tensor total;
  if (grads.empty()) {
    total = Tensor::zeros({1}, DType::f32, device);
  } else {
    // The product of two f32 values rounds once: the same bits as squaring in double and rounding.
    const Tensor norm = ops::global_l2_norm(grads).reshape({1});
    total = ops::mul(norm, norm);
  }
  for (comm::ProcessGroup* group : groups) {
    if (group->size() > 1) group->all_reduce(total, comm::ReduceOp::sum)->wait();
  }
  return total;
}

}  // namespace titan::parallel
