// Sampling a latent from FLUX: Euler steps of the predicted velocity from
// noise (t = 1) to data (t = 0) over a schedule, with classifier-free
// guidance when an unconditional input is given.
#pragma once

#include <functional>
#include <vector>

#include "titan/models/flux/flux_model.h"

namespace titan::models::flux {

// The velocity at tokens x and time t.
using VelocityField = std::function<Tensor(const Tensor& x, double t)>;

// x_{i+1} = x_i + (t_{i+1} - t_i) * v(x_i, t_i) over schedule t_0 .. t_n,
// from x_0 = noise; returns x_n. Runs without recording gradients.
Tensor euler_integrate(const VelocityField& velocity, const Tensor& noise, const std::vector<double>& schedule);

// The model's velocity field for `conditional` (its img is replaced by each
// step's tokens and its timesteps by t). With `unconditional` (the same
// request with an empty prompt's encodings), classifier-free guidance:
// v = v_u + cfg_scale * (v_c - v_u).
VelocityField flux_velocity(const FluxModel& model, const FluxInputs& conditional,
                            const FluxInputs* unconditional = nullptr, double cfg_scale = 1.0);

}  // namespace titan::models::flux
