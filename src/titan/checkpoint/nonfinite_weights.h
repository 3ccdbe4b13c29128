// Weights read from files are checked for NaN and Inf before anything uses
// them: a model with one NaN projection otherwise trains to a finite loss for
// a while, or generates nothing at all, and `convert` would copy it silently.
// Every tensor holding such values is named, with its counts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::checkpoint {

struct NonFiniteTensor {
  std::string name;
  int64_t nan = 0, inf = 0, elements = 0;
};

// The tensors of `tensors` (floating point, any device) holding NaN or +-Inf, in order.
std::vector<NonFiniteTensor> find_nonfinite(const std::vector<std::pair<std::string, Tensor>>& tensors);

// A titan::Error naming `source`, each non-finite tensor and `allow_hint` (the
// flag or key that loads them anyway); with `allow`, the same as a warning on
// stderr and the load goes on.
void check_finite_weights(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& source,
                          bool allow, const std::string& allow_hint);
// The same for tensors found one at a time (a conversion that streams them):
// nothing when `found` is empty.
void report_nonfinite(const std::vector<NonFiniteTensor>& found, const std::string& source, bool allow,
                      const std::string& allow_hint);

}  // namespace titan::checkpoint
