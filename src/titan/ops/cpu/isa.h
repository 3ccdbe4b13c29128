// Which CPU kernel set is in use ("avx512" or "baseline"), for logs and benchmarks.
#pragma once

namespace titan::ops::cpu {

bool cpu_has_avx512();
const char* selected_isa();

}  // namespace titan::ops::cpu
