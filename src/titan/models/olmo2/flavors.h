// OLMo 2 (Ai2): RMSNorm after attention and after the MLP (on their outputs,
// before the residual add) instead of before, and q/k norms over the whole
// projection rather than per head.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::olmo2 {

ModelSpec spec();

}  // namespace titan::models::olmo2
