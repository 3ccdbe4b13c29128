// Placeholder: the CPU kernels for this op are not written yet; calling the op
// raises "op has no kernel for device cpu".
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {

void register_cross_entropy() {}

}  // namespace titan::ops::cpu::TITAN_ISA
