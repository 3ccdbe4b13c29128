#include "titan/distributed/grad_norm.h"

#include <cmath>

#include "titan/ops/adamw.h"
#include "titan/ops/reduction.h"

namespace titan::distributed {

double global_grad_norm(std::span<const Tensor> grads, const std::vector<ProcessGroup*>& groups) {
  double local = 0.0;
  if (!grads.empty()) {
    const double norm = ops::global_l2_norm(grads).item();
    local = norm * norm;
  }
  Tensor total = Tensor::full({1}, local, DType::f32);
  for (ProcessGroup* group : groups) {
    if (group->size() > 1) group->all_reduce(total, ReduceOp::sum)->wait();
  }
  return std::sqrt(total.item());
}

double clip_grad_norm_(std::span<const Tensor> grads, double max_norm, const std::vector<ProcessGroup*>& groups) {
  const double norm = global_grad_norm(grads, groups);
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1.0) ops::scale_all_(grads, static_cast<float>(factor));
  return norm;
}

}  // namespace titan::distributed
