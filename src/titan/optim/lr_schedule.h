// Warmup-stable-decay learning-rate schedule, TorchTitan's to the step: linear
// warmup to the peak, flat, then a linear, sqrt or cosine decay towards
// min_lr_factor x peak over the last decay_ratio of training.
//
// TorchTitan drives its schedule through PyTorch's LambdaLR, stepped after
// each optimizer step, so training step s computes with index s - 1; and it
// counts a virtual step after the last, so the decay ends one step short of
// min_lr (progress (D - 1) / D on the last step) and stays flat one step
// longer than a plain "last D steps decay" reading.
#pragma once

#include <cstdint>
#include <string>

namespace titan::optim {

struct LrSchedule {
  int64_t warmup_steps = 0;  // more than total_steps warms up over total_steps
  int64_t total_steps = 1;
  double decay_ratio = -1.0;  // < 0: decay over every step after warmup (TorchTitan's None)
  std::string decay_type = "linear";
  double min_lr_factor = 0.0;

  // Multiplier of the peak LR for optimizer step `step` (1-based); steps
  // after total_steps keep the last step's.
  double factor(int64_t step) const;
  // The decay's length asked for: round(decay_ratio x total_steps) as
  // Python rounds (halves to even), or every step after warmup.
  int64_t requested_decay_steps() const;
  // ... at most what warmup leaves.
  int64_t decay_steps() const;
};

}  // namespace titan::optim
