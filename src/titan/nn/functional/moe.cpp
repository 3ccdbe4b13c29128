// Differentiable mixture-of-experts functions: routing (sigmoid scores, top-k
// weights and their renormalisation), moving token rows into expert order and
// back, the grouped expert GEMM, and the hook that gives an auxiliary loss
// its gradient.
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"
#include "titan/ops/gemm.h"
#include "titan/ops/grouped_gemm.h"
#include "titan/ops/moe_routing.h"

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

Tensor grouped_linear(const Tensor& x, const Tensor& w, const Tensor& counts) {
  Tensor y = ops::grouped_gemm(x, w, counts);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const Tensor saved_x = need_w ? x.detach() : Tensor(), saved_w = need_x ? w.detach() : Tensor();
  const Tensor saved_counts = counts.detach();
  record("GroupedLinearBackward", {&x, &w}, {&y}, [=](const auto& g) {
    const Tensor grad = g[0].contiguous();
    const bool want_x = need_x && autograd::input_grad_wanted(0), want_w = need_w && autograd::input_grad_wanted(1);
    return std::vector<Tensor>{want_x ? ops::grouped_gemm_input_grad(grad, saved_w, saved_counts) : Tensor(),
                               want_w ? ops::grouped_gemm_weight_grad(grad, saved_x, saved_counts) : Tensor()};
  });
  return y;
}

namespace {

// Each expert's block of rows: [offsets[e], offsets[e] + counts[e]).
std::vector<int64_t> host_offsets(const Tensor& counts) {
  const AllowHostReadsScope host_reads;  // the loop needs them (see looped_linear)
  const std::vector<int64_t> per_expert = counts.to_ints();
  std::vector<int64_t> offsets(per_expert.size() + 1, 0);
  for (size_t e = 0; e < per_expert.size(); ++e) offsets[e + 1] = offsets[e] + per_expert[e];
  return offsets;
}

}  // namespace

Tensor looped_linear(const Tensor& x, const Tensor& w, const Tensor& counts) {
  TITAN_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2) && counts.numel() == w.size(0),
              "looped_linear: rows {} and expert weights {} ([E, out, in]) with {} counts do not match",
              shape_str(x.shape()), shape_str(w.shape()), counts.numel());
  const std::vector<int64_t> offsets = host_offsets(counts);
  TITAN_CHECK(offsets.back() == x.size(0), "looped_linear: the counts add up to {} rows, x has {}", offsets.back(),
              x.size(0));
  const int64_t experts = w.size(0);
  Tensor y = Tensor::empty({x.size(0), w.size(1)}, x.dtype(), x.device());
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[static_cast<size_t>(e)], n = offsets[static_cast<size_t>(e) + 1] - first;
    if (n > 0) ops::gemm(x.narrow(0, first, n), w.select(0, e).transpose(0, 1), y.narrow(0, first, n));
  }
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const Tensor saved_x = need_w ? x.detach() : Tensor(), saved_w = need_x ? w.detach() : Tensor();
  record("LoopedLinearBackward", {&x, &w}, {&y}, [=](const auto& g) {
    const Tensor grad = g[0].contiguous();
    const bool want_x = need_x && autograd::input_grad_wanted(0), want_w = need_w && autograd::input_grad_wanted(1);
    Tensor grad_x = want_x ? Tensor::empty({grad.size(0), saved_w.size(2)}, grad.dtype(), grad.device()) : Tensor();
    Tensor grad_w =
        want_w ? Tensor::zeros({experts, grad.size(1), saved_x.size(1)}, grad.dtype(), grad.device()) : Tensor();
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t first = offsets[static_cast<size_t>(e)], n = offsets[static_cast<size_t>(e) + 1] - first;
      if (n == 0) continue;
      const Tensor g_e = grad.narrow(0, first, n);
      if (want_x) ops::gemm(g_e, saved_w.select(0, e), grad_x.narrow(0, first, n));
      if (want_w) ops::gemm(g_e.transpose(0, 1), saved_x.narrow(0, first, n), grad_w.select(0, e));
    }
    return std::vector<Tensor>{grad_x, grad_w};
  });
  return y;
}

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
