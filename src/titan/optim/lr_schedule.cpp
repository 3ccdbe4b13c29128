#include "titan/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "titan/core/error.h"

namespace titan::optim {

double LrSchedule::factor(int64_t step) const {
  // Warmup reaches the peak on its last step: step s of W gets s / W.
  if (step <= warmup_steps) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(warmup_steps, 1));
  const int64_t decay_steps = decay_ratio < 0.0
                                  ? total_steps - warmup_steps
                                  : static_cast<int64_t>(std::llround(decay_ratio * static_cast<double>(total_steps)));
  const int64_t decay_start = total_steps - decay_steps;
  if (decay_steps <= 0 || step <= decay_start) return 1.0;
  const double progress = std::min(1.0, static_cast<double>(step - decay_start) / static_cast<double>(decay_steps));
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
