// Mixed precision as a parametrization: every parameter reaches forward cast
// to the compute dtype (its gradient cast back to the f32 master weight's).
// Model-agnostic: any module tree. A weight marked for float8 all-gather
// (nn::Parameter::float8_all_gather) is cast to float8 from its master.
#pragma once

#include "titan/nn/module.h"

namespace titan::parallel {

// No-op for f32.
void apply_mixed_precision(nn::Module& model, DType dtype);

}  // namespace titan::parallel
