// Warmup-stable-decay learning-rate schedule (TorchTitan's): linear warmup to
// the peak, flat, then a linear, sqrt or cosine decay to min_lr_factor x peak
// over the last decay_ratio of training.
#pragma once

#include <cstdint>
#include <string>

namespace titan::optim {

struct LrSchedule {
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double decay_ratio = -1.0;  // < 0: decay over every step after warmup
  std::string decay_type = "linear";
  double min_lr_factor = 0.0;

  // Multiplier of the peak LR for optimizer step `step` (1-based).
  double factor(int64_t step) const;
};

}  // namespace titan::optim
