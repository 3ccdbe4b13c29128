// Autograd functions of the grouped expert GEMM (ops/grouped_gemm.h), and its
// plain reference: the same product as a loop of ordinary GEMMs, one per
// expert, which reads the counts on the host.
#include "titan/ops/grouped_gemm.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"
#include "titan/ops/gemm.h"

namespace titan::F {

using autograd::record;

Tensor grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts) {
  Tensor y = ops::grouped_gemm(x, w, counts);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const Tensor saved_x = need_w ? x.detach() : Tensor(), saved_w = need_x ? w.detach() : Tensor();
  const Tensor saved_counts = counts.detach();
  record("GroupedGemmBackward", {&x, &w}, {&y}, [=](const auto& g) {
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
  const AllowHostReadsScope host_reads;  // the loop needs them (see looped_grouped_gemm)
  const std::vector<int64_t> per_expert = counts.to_ints();
  std::vector<int64_t> offsets(per_expert.size() + 1, 0);
  for (size_t e = 0; e < per_expert.size(); ++e) offsets[e + 1] = offsets[e] + per_expert[e];
  return offsets;
}

}  // namespace

Tensor looped_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts) {
  TITAN_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2) && counts.numel() == w.size(0),
              "looped_grouped_gemm: rows {} and expert weights {} ([E, out, in]) with {} counts do not match",
              shape_str(x.shape()), shape_str(w.shape()), counts.numel());
  const std::vector<int64_t> offsets = host_offsets(counts);
  TITAN_CHECK(offsets.back() == x.size(0), "looped_grouped_gemm: the counts add up to {} rows, x has {}",
              offsets.back(), x.size(0));
  const int64_t experts = w.size(0);
  Tensor y = Tensor::empty({x.size(0), w.size(1)}, x.dtype(), x.device());
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[static_cast<size_t>(e)], n = offsets[static_cast<size_t>(e) + 1] - first;
    if (n > 0) ops::gemm(x.narrow(0, first, n), w.select(0, e).transpose(0, 1), y.narrow(0, first, n));
  }
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const Tensor saved_x = need_w ? x.detach() : Tensor(), saved_w = need_x ? w.detach() : Tensor();
  record("LoopedGroupedGemmBackward", {&x, &w}, {&y}, [=](const auto& g) {
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

}  // namespace titan::F
