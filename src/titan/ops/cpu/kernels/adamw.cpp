// CPU fused AdamW: all tensors' elements form one index space split among
// threads, so a few large tensors and many small ones load-balance alike.
// Per element: one read of p, g, m, v and one write of p, m, v.
#include <cmath>
#include <vector>

#include "titan/ops/adamw.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

template <typename P, typename G, typename S>
void adamw_range(P* p, const G* g, S* m, S* v, int64_t begin, int64_t end, const AdamWHyper& h,
                 const AdamWStepScalars& s) {
  const float decay = s.decay, step_size = s.step_size, inv_sqrt_bias2 = s.inv_sqrt_bias2;
  for (int64_t i = begin; i < end; ++i) {
    const float grad = to_f32(g[i]);
    const float m_new = h.beta1 * to_f32(m[i]) + (1.0f - h.beta1) * grad;
    const float v_new = h.beta2 * to_f32(v[i]) + (1.0f - h.beta2) * grad * grad;
    const float denom = std::sqrt(v_new) * inv_sqrt_bias2 + h.eps;
    p[i] = from_f32<P>(to_f32(p[i]) * decay - step_size * m_new / denom);
    m[i] = from_f32<S>(m_new);
    v[i] = from_f32<S>(v_new);
  }
}

void adamw_kernel(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg,
                  std::span<const Tensor> exp_avg_sq, const AdamWHyper& hyper) {
  AdamWStepScalars scalars = adamw_step_scalars(hyper);
  if (hyper.step_scalars.defined()) {
    const float* stored = hyper.step_scalars.data<float>();
    scalars = {stored[0], stored[1], stored[2]};
  }
  // Validate every dtype before entering the parallel region.
  for (size_t t = 0; t < params.size(); ++t) {
    dispatch_float("adamw", params[t].dtype(), [](auto) {});
    dispatch_float("adamw", grads[t].dtype(), [](auto) {});
    dispatch_float("adamw", exp_avg[t].dtype(), [](auto) {});
    TITAN_CHECK(exp_avg[t].dtype() == exp_avg_sq[t].dtype(), "adamw: moments of tensor {} differ in dtype", t);
  }
  std::vector<int64_t> starts(params.size() + 1, 0);
  for (size_t t = 0; t < params.size(); ++t) starts[t + 1] = starts[t] + params[t].numel();
  parallel_for(starts.back(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (size_t t = 0; t < params.size(); ++t) {
      const int64_t lo = std::max(begin, starts[t]) - starts[t];
      const int64_t hi = std::min(end, starts[t + 1]) - starts[t];
      if (lo >= hi) continue;
      dispatch_float("adamw", params[t].dtype(), [&](auto p_tag) {
        using P = decltype(p_tag);
        dispatch_float("adamw", grads[t].dtype(), [&](auto g_tag) {
          using G = decltype(g_tag);
          dispatch_float("adamw", exp_avg[t].dtype(), [&](auto s_tag) {
            using S = decltype(s_tag);
            adamw_range(params[t].data<P>(), grads[t].data<G>(), exp_avg[t].data<S>(), exp_avg_sq[t].data<S>(), lo, hi,
                        hyper, scalars);
          });
        });
      });
    }
  });
}

}  // namespace

void register_adamw() { adamw_kernels.set_kernel(DeviceType::cpu, adamw_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
