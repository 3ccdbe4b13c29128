#include "titan/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "titan/core/error.h"

namespace titan::optim {

namespace {
// Python's round(): to the nearest integer, halves to the even one.
int64_t round_half_even(double x) {
  const double floor = std::floor(x);
  const double rest = x - floor;
  auto down = static_cast<int64_t>(floor);
  if (rest > 0.5 || (rest == 0.5 && down % 2 != 0)) ++down;
  return down;
}
}  // namespace

int64_t LrSchedule::requested_decay_steps() const {
  if (decay_ratio < 0.0) return total_steps - std::min(warmup_steps, total_steps);
  return round_half_even(decay_ratio * static_cast<double>(total_steps));
}

int64_t LrSchedule::decay_steps() const {
  return std::min(requested_decay_steps(), total_steps - std::min(warmup_steps, total_steps));
}

double LrSchedule::factor(int64_t step) const {
  const int64_t warmup = std::min(warmup_steps, total_steps);
  // Warmup reaches the peak on its last step: step s of W gets s / W.
  if (step <= warmup) return static_cast<double>(step) / static_cast<double>(warmup);
  // With the virtual step, steps up to total + 1 - D are flat; the decay's
  // progress is (s - (total + 1 - D)) / D.
  const int64_t decay = decay_steps();
  const int64_t last_flat = total_steps + 1 - decay;
  if (decay <= 0 || step <= last_flat) return 1.0;
  // Past total_steps (lr_scheduler.total_steps shorter than training.steps)
  // the LR stays at the last step's; TorchTitan's formula would go on
  // (a linear decay below zero).
  const double progress = static_cast<double>(std::min(step, total_steps) - last_flat) / static_cast<double>(decay);
  double curve;
  if (decay_type == "linear") {
    curve = 1.0 - progress;
  } else if (decay_type == "sqrt") {
    curve = 1.0 - std::sqrt(progress);
  } else if (decay_type == "cosine") {
    curve = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  } else {
    fail("unknown decay_type '{}' (expected linear, sqrt or cosine)", decay_type);
  }
  return min_lr_factor + (1.0 - min_lr_factor) * curve;
}

}  // namespace titan::optim
