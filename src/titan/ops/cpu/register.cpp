// Chooses the CPU kernel set for this machine and registers it: AVX-512 when
// CPUID reports it, the portable build otherwise. TITAN_CPU_ISA=baseline or
// =avx512 overrides the choice (tests run both sets).
#include <cstdlib>
#include <string_view>

#include "titan/core/error.h"
#include "titan/ops/cpu/isa.h"
#include "titan/ops/cpu/kernels/kernel_files.h"

namespace titan::ops::cpu {

#define TITAN_DECLARE_REGISTER(name) void register_##name();
namespace baseline {
TITAN_CPU_KERNEL_FILES(TITAN_DECLARE_REGISTER)
}
namespace avx512 {
TITAN_CPU_KERNEL_FILES(TITAN_DECLARE_REGISTER)
}
#undef TITAN_DECLARE_REGISTER

void register_gemm();  // oneDNN picks its own ISA

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

const char* selected_isa() {
  static const char* isa = [] {
    const char* forced = std::getenv("TITAN_CPU_ISA");
    if (forced != nullptr && *forced != '\0') {
      const std::string_view name(forced);
      TITAN_CHECK(name == "baseline" || name == "avx512", "TITAN_CPU_ISA='{}': expected baseline or avx512", name);
      TITAN_CHECK(name == "baseline" || cpu_has_avx512(), "TITAN_CPU_ISA=avx512 but this CPU lacks AVX-512");
      return name == "avx512" ? "avx512" : "baseline";
    }
    return cpu_has_avx512() ? "avx512" : "baseline";
  }();
  return isa;
}

void register_kernels() {
#define TITAN_CALL_AVX512(name) avx512::register_##name();
#define TITAN_CALL_BASELINE(name) baseline::register_##name();
  if (std::string_view(selected_isa()) == "avx512") {
    TITAN_CPU_KERNEL_FILES(TITAN_CALL_AVX512)
  } else {
    TITAN_CPU_KERNEL_FILES(TITAN_CALL_BASELINE)
  }
#undef TITAN_CALL_AVX512
#undef TITAN_CALL_BASELINE
  register_gemm();
}

}  // namespace titan::ops::cpu
