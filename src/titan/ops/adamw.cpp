#include "titan/ops/adamw.h"

#include <cmath>

#include "titan/ops/checks.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/reduction.h"

namespace titan::ops {

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg,
                std::span<const Tensor> exp_avg_sq, const AdamWHyper& hyper) {
  TITAN_CHECK(params.size() == grads.size() && params.size() == exp_avg.size() && params.size() == exp_avg_sq.size(),
              "adamw: {} params, {} grads, {} and {} moments", params.size(), grads.size(), exp_avg.size(),
              exp_avg_sq.size());
  TITAN_CHECK(hyper.step >= 1, "adamw: step must be >= 1, got {}", hyper.step);
  if (params.empty()) return;
  for (size_t i = 0; i < params.size(); ++i) {
    for (const Tensor* t : {&grads[i], &exp_avg[i], &exp_avg_sq[i]}) {
      check_defined("adamw", *t, "grad or moment");
      check_same_shape("adamw", params[i], *t);
      check_same_device("adamw", params[i], *t);
      check_contiguous("adamw", *t, "grad or moment");
    }
    check_contiguous("adamw", params[i], "param");
  }
  if (hyper.step_scalars.defined()) {
    const Tensor& s = hyper.step_scalars;
    TITAN_CHECK(s.dtype() == DType::f32 && s.numel() == 3 && s.is_contiguous() && s.device() == params.front().device(),
                "adamw: step_scalars must be 3 contiguous f32 values on {}, got {} {} on {}",
                params.front().device().str(), dtype_name(s.dtype()), shape_str(s.shape()), s.device().str());
  }
  if (params.front().device().is_meta()) return;
  adamw_kernels(params.front().device(), params, grads, exp_avg, exp_avg_sq, hyper);
}

AdamWStepScalars adamw_step_scalars(const AdamWHyper& hyper) {
  const double bias1 = 1.0 - std::pow(static_cast<double>(hyper.beta1), static_cast<double>(hyper.step));
  const double bias2 = 1.0 - std::pow(static_cast<double>(hyper.beta2), static_cast<double>(hyper.step));
  return {1.0f - hyper.lr * hyper.weight_decay, static_cast<float>(hyper.lr / bias1),
          static_cast<float>(1.0 / std::sqrt(bias2))};
}

void scale_all_(std::span<const Tensor> tensors, float factor) {
  for (const Tensor& t : tensors) scale_(t, factor);
}

double clip_grad_norm_(std::span<const Tensor> grads, double max_norm) {
  const double norm = global_l2_norm(grads).item();
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1. A non-finite norm
  // leaves the gradients as they are (clip_scalars says why).
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1.0) scale_all_(grads, static_cast<float>(factor));
  return norm;
}

}  // namespace titan::ops
