// Gemma 3 text models (Google): Gemma 2's block with per-head q/k norms and
// no soft-capping; five sliding-window layers (RoPE base 10k) per global one
// (RoPE base 1M).
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::gemma3 {

ModelSpec spec();

}  // namespace titan::models::gemma3
