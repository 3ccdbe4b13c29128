// CPU Gated DeltaNet gates (ops/gdn_gates.h), f64 math per element. The
// per-head gradients of A_log and dt_bias sum over every (row, token) in
// order, one head per work item: the result does not depend on the thread count.
#include <cmath>
#include <vector>

#include "titan/ops/gdn_gates.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

double softplus(double u) { return u > 20.0 ? u : std::log1p(std::exp(u)); }
double logistic(double u) { return 1.0 / (1.0 + std::exp(-u)); }

// A tensor of any float dtype as f32 values.
std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_float("gdn_gates", t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = t.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_f32(src[i]);
  });
  return out;
}

void store(const Tensor& t, const std::vector<double>& values) {
  dispatch_float("gdn_gates_backward", t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = t.data<T>();
    parallel_for(static_cast<int64_t>(values.size()), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = from_f32<T>(static_cast<float>(values[i]));
    });
  });
}

void gdn_gates_kernel(const GdnGates& out, const GdnGateInputs& in) {
  const std::vector<float> a = as_f32(in.a), b = as_f32(in.b), a_log = as_f32(in.a_log), dt = as_f32(in.dt_bias);
  const int64_t heads = in.a.size(2), n = in.a.numel();
  float* g = out.g.data<float>();
  float* beta = out.beta.data<float>();
  parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t h = i % heads;
      g[i] = static_cast<float>(-std::exp(static_cast<double>(a_log[h])) * softplus(static_cast<double>(a[i]) + dt[h]));
      beta[i] = static_cast<float>(logistic(b[i]));
    }
  });
}

void gdn_gates_backward_kernel(const GdnGateGrads& grads, const Tensor& grad_g, const Tensor& grad_beta,
                               const GdnGateInputs& in) {
  const std::vector<float> a = as_f32(in.a), b = as_f32(in.b), a_log = as_f32(in.a_log), dt = as_f32(in.dt_bias);
  const std::vector<float> dg = grad_g.defined() ? as_f32(grad_g) : std::vector<float>(a.size(), 0.0f);
  const std::vector<float> dbeta = grad_beta.defined() ? as_f32(grad_beta) : std::vector<float>(a.size(), 0.0f);
  const int64_t heads = in.a.size(2), n = in.a.numel();
  std::vector<double> da(a.size()), db(a.size()), dal(static_cast<size_t>(heads)), ddt(static_cast<size_t>(heads));
  parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t h = i % heads;
      const double decay = std::exp(static_cast<double>(a_log[h])), u = static_cast<double>(a[i]) + dt[h];
      da[i] = -decay * (u > 20.0 ? 1.0 : logistic(u)) * dg[i];
      const double s = logistic(b[i]);
      db[i] = dbeta[i] * s * (1.0 - s);
    }
  });
  parallel_for(heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      double sum_dt = 0.0, sum_log = 0.0;
      const double decay = std::exp(static_cast<double>(a_log[h]));
      for (int64_t i = h; i < n; i += heads) {
        sum_dt += da[i];
        sum_log += -decay * softplus(static_cast<double>(a[i]) + dt[h]) * dg[i];
      }
      ddt[h] = sum_dt;
      dal[h] = sum_log;
    }
  });
  store(grads.grad_a, da);
  store(grads.grad_b, db);
  store(grads.grad_a_log, dal);
  store(grads.grad_dt_bias, ddt);
}

}  // namespace

void register_gdn_gates() {
  gdn_gates_kernels.set_kernel(DeviceType::cpu, gdn_gates_kernel);
  gdn_gates_backward_kernels.set_kernel(DeviceType::cpu, gdn_gates_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
