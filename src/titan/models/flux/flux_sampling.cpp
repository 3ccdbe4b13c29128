#include "titan/models/flux/flux_sampling.h"

#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/ops/elementwise.h"

namespace titan::models::flux {

Tensor euler_integrate(const VelocityField& velocity, const Tensor& noise, const std::vector<double>& schedule) {
  TITAN_CHECK(schedule.size() >= 2, "euler_integrate: a schedule needs at least two times (got {})", schedule.size());
  const autograd::NoGradGuard no_grad;
  Tensor x = noise;
  for (size_t i = 0; i + 1 < schedule.size(); ++i) {
    const Tensor v = velocity(x, schedule[i]);
    TITAN_CHECK(v.shape() == x.shape(), "euler_integrate: the velocity {} does not match the tokens {}",
                shape_str(v.shape()), shape_str(x.shape()));
    x = ops::add(x, ops::scale(v.to(x.dtype()), static_cast<float>(schedule[i + 1] - schedule[i])));
  }
  return x;
}

namespace {

Tensor predict(const FluxModel& model, FluxInputs inputs, const Tensor& x, double t) {
  inputs.img = x.to(inputs.txt.dtype());
  inputs.timesteps = Tensor::full({x.size(0)}, t, DType::f32, x.device());
  return model.forward(inputs).to(x.dtype());
}

}  // namespace

VelocityField flux_velocity(const FluxModel& model, const FluxInputs& conditional, const FluxInputs* unconditional,
                            double cfg_scale) {
  if (unconditional == nullptr) {
    return [&model, conditional](const Tensor& x, double t) { return predict(model, conditional, x, t); };
  }
  return [&model, conditional, unconditional = *unconditional, cfg_scale](const Tensor& x, double t) {
    const Tensor v_c = predict(model, conditional, x, t), v_u = predict(model, unconditional, x, t);
    return ops::add(v_u, ops::scale(ops::sub(v_c, v_u), static_cast<float>(cfg_scale)));
  };
}

}  // namespace titan::models::flux
