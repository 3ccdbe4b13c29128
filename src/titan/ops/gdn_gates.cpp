#include "titan/ops/gdn_gates.h"

#include <cmath>
#include <vector>

#include "titan/ops/checks.h"

namespace titan::ops {
namespace gdn_gates_host {

double softplus(double u) { return u > 20.0 ? u : std::log1p(std::exp(u)); }
double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }

// A tensor's values as f32 on the host (see ops/causal_conv1d.cpp's host_floats).
std::vector<float> host_floats(const Tensor& t) {
  Tensor cpu;
  if (t.device().is_cpu()) {
    cpu = t.to(DType::f32).contiguous();
  } else {
    const AllowHostReadsScope allow;
    cpu = t.to(Device::cpu()).to(DType::f32).contiguous();
  }
  const float* data = cpu.data<float>();
  return std::vector<float>(data, data + cpu.numel());
}

void check(const char* op, const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  check_defined(op, a_log, "A_log");
  check_defined(op, dt_bias, "dt_bias");
  check_rank(op, a, 3, "a [B, T, H]");
  TITAN_CHECK(b.shape() == a.shape(), "{}: b is {}, expected a's shape {}", op, shape_str(b.shape()),
              shape_str(a.shape()));
  const Shape heads{a.size(2)};
  TITAN_CHECK(a_log.shape() == heads && dt_bias.shape() == heads, "{}: A_log {} and dt_bias {} must be [H] = [{}]", op,
              shape_str(a_log.shape()), shape_str(dt_bias.shape()), a.size(2));
}

Tensor on_device_like(const std::vector<double>& values, const Shape& shape, DType dtype, const Tensor& like) {
  return Tensor::from_floats(std::vector<float>(values.begin(), values.end()), shape).to(dtype).to(like.device());
}

}  // namespace gdn_gates_host

GdnGates gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias) {
  using namespace gdn_gates_host;
  check("gdn_gates", a, b, a_log, dt_bias);
  const std::vector<float> av = host_floats(a), bv = host_floats(b), al = host_floats(a_log), dt = host_floats(dt_bias);
  const int64_t heads = a.size(2);
  std::vector<double> g(av.size()), beta(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    const size_t h = i % static_cast<size_t>(heads);
    g[i] = -std::exp(static_cast<double>(al[h])) * softplus(static_cast<double>(av[i]) + dt[h]);
    beta[i] = sigmoid(bv[i]);
  }
  return {on_device_like(g, a.shape(), DType::f32, a), on_device_like(beta, a.shape(), DType::f32, a)};
}

GdnGateGrads gdn_gates_backward(const Tensor& grad_g, const Tensor& grad_beta, const Tensor& a, const Tensor& b,
                                const Tensor& a_log, const Tensor& dt_bias) {
  using namespace gdn_gates_host;
  check("gdn_gates_backward", a, b, a_log, dt_bias);
  const std::vector<float> av = host_floats(a), bv = host_floats(b), al = host_floats(a_log), dt = host_floats(dt_bias);
  const std::vector<float> dg = grad_g.defined() ? host_floats(grad_g) : std::vector<float>(av.size(), 0.0f);
  const std::vector<float> dbeta = grad_beta.defined() ? host_floats(grad_beta) : std::vector<float>(av.size(), 0.0f);
  const int64_t heads = a.size(2);
  std::vector<double> da(av.size()), db(av.size()), dal(static_cast<size_t>(heads)), ddt(static_cast<size_t>(heads));
  for (size_t i = 0; i < av.size(); ++i) {
    const size_t h = i % static_cast<size_t>(heads);
    const double decay = std::exp(static_cast<double>(al[h])), u = static_cast<double>(av[i]) + dt[h];
    const double d_u = -decay * (u > 20.0 ? 1.0 : sigmoid(u)) * dg[i];
    da[i] = d_u;
    ddt[h] += d_u;
    dal[h] += -decay * softplus(u) * dg[i];
    const double s = sigmoid(bv[i]);
    db[i] = dbeta[i] * s * (1.0 - s);
  }
  return {on_device_like(da, a.shape(), a.dtype(), a), on_device_like(db, b.shape(), b.dtype(), b),
          on_device_like(dal, a_log.shape(), a_log.dtype(), a_log),
          on_device_like(ddt, dt_bias.shape(), dt_bias.dtype(), dt_bias)};
}

}  // namespace titan::ops
