// Autograd functions of the mixture-of-experts routing ops (ops/moe_routing.h):
// sigmoid scores, top-k weights and their renormalisation, and moving token
// rows into expert order and back.
#include "titan/ops/moe_routing.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

Tensor sigmoid(const Tensor& x) {
  Tensor y = ops::sigmoid(x);
  const Tensor saved_y = y.detach();
  record("SigmoidBackward", {&x}, {&y},
         [saved_y](const auto& g) { return std::vector<Tensor>{ops::sigmoid_backward(g[0], saved_y)}; });
  return y;
}

Tensor gather_columns(const Tensor& x, const Tensor& indices) {
  Tensor y = ops::gather_columns(x, indices);
  const Tensor saved_indices = indices.detach();
  const int64_t columns = x.size(1);
  record("GatherColumnsBackward", {&x}, {&y}, [=](const auto& g) {
    return std::vector<Tensor>{ops::scatter_columns(g[0].contiguous(), saved_indices, columns)};
  });
  return y;
}

Tensor normalize_rows(const Tensor& x) {
  Tensor y = ops::normalize_rows(x);
  const Tensor saved_x = x.detach();
  record("NormalizeRowsBackward", {&x}, {&y},
         [saved_x](const auto& g) { return std::vector<Tensor>{ops::normalize_rows_backward(g[0], saved_x)}; });
  return y;
}

Tensor permute_tokens(const Tensor& x, const Tensor& order, const Tensor& inverse, int64_t k) {
  Tensor y = ops::permute_tokens(x, order, k);
  const Tensor saved_inverse = inverse.detach();
  record("PermuteTokensBackward", {&x}, {&y},
         [=](const auto& g) { return std::vector<Tensor>{ops::unpermute_sum(g[0].contiguous(), saved_inverse, k)}; });
  return y;
}

Tensor combine_experts(const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  Tensor y = ops::combine_experts(rows, inverse, weights);
  const Tensor saved_rows = rows.detach(), saved_inverse = inverse.detach(), saved_weights = weights.detach();
  record("CombineExpertsBackward", {&rows, &weights}, {&y}, [=](const auto& g) {
    ops::CombineGrads grads =
        ops::combine_experts_backward(g[0].contiguous(), saved_rows, saved_inverse, saved_weights);
    return std::vector<Tensor>{grads.grad_rows, grads.grad_weights};
  });
  return y;
}

}  // namespace titan::F
