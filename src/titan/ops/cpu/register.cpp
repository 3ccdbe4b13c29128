// Chooses the CPU kernel set for this machine and registers it: AVX-512 when
// CPUID reports it, else AVX2+FMA (x86-64-v3), else the portable build.
// TITAN_CPU_ISA=baseline|avx2|avx512 forces a set (the tests run every set the
// CPU has) and caps oneDNN's ISA to match, so an AVX-512 machine told
// TITAN_CPU_ISA=avx2 runs what an AVX2-only machine would, GEMM included.
#include <cpuid.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <string_view>

#include "titan/core/error.h"
#include "titan/ops/cpu/isa.h"
#include "titan/ops/cpu/kernel_files.h"

namespace titan::ops::cpu {

#define TITAN_DECLARE_REGISTER(name) void register_##name();
namespace baseline {
TITAN_CPU_KERNEL_FILES(TITAN_DECLARE_REGISTER)
}
#if TITAN_BUILT_AVX2
namespace avx2 {
TITAN_CPU_KERNEL_FILES(TITAN_DECLARE_REGISTER)
}
#endif
#if TITAN_BUILT_AVX512
namespace avx512 {
TITAN_CPU_KERNEL_FILES(TITAN_DECLARE_REGISTER)
}
#endif
TITAN_CPU_ONEDNN_KERNEL_FILES(TITAN_DECLARE_REGISTER)
#undef TITAN_DECLARE_REGISTER

namespace {

constexpr CpuIsa kAllIsas[] = {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512};

CpuIsa best_supported_isa() {
  if (cpu_supports(CpuIsa::avx512)) return CpuIsa::avx512;
  if (cpu_supports(CpuIsa::avx2)) return CpuIsa::avx2;
  return CpuIsa::baseline;
}

// oneDNN reads its cap once, at its first primitive; kernels register before
// any op runs, so this call always comes first.
void cap_onednn(CpuIsa isa) {
  const dnnl_cpu_isa_t cap = isa == CpuIsa::avx2 ? dnnl_cpu_isa_avx2 : dnnl_cpu_isa_sse41;
  TITAN_CHECK(dnnl_set_max_cpu_isa(cap) == dnnl_success,
              "TITAN_CPU_ISA={}: oneDNN was already in use, so its ISA could not be capped to match",
              cpu_isa_name(isa));
}

// Below AMX: Debian's oneDNN 2.6 computes some bf16 products wrongly with
// its AMX kernels. On a Xeon with AMX the fused loss's [7 x 16] . [16 x 40]
// bf16 logits GEMM gave a loss of 6.062 where every other ISA (and PyTorch)
// gives 6.151 (tests/ops/nonfinite_test.cpp caught it). AVX-512 BF16 is
// the fastest ISA titan has checked; this call overrides ONEDNN_MAX_CPU_ISA.
void cap_onednn_below_amx() { dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16); }

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline:
      return "baseline";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
  }
  return "?";
}

bool cpu_supports(CpuIsa isa) {
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know the
  // name); the OS's saving of the AVX state is part of the "avx2" check.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2") && f16c;
  // A set left out of the build (TITAN_CPU_ISAS) counts as unsupported: run time never picks it.
  switch (isa) {
    case CpuIsa::baseline:
      return true;
    case CpuIsa::avx2:
      return TITAN_BUILT_AVX2 && avx2;
    case CpuIsa::avx512:
      return TITAN_BUILT_AVX512 && avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  }
  return false;
}

CpuIsa selected_cpu_isa() {
  static const CpuIsa isa = [] {
    const char* forced = std::getenv("TITAN_CPU_ISA");
    if (forced == nullptr || *forced == '\0') {
      const CpuIsa best = best_supported_isa();
      if (best == CpuIsa::avx512) cap_onednn_below_amx();
      return best;
    }
    for (CpuIsa candidate : kAllIsas) {
      if (std::string_view(forced) != cpu_isa_name(candidate)) continue;
      TITAN_CHECK(cpu_supports(candidate),
                  "TITAN_CPU_ISA={} but this CPU lacks it, or this build left it out (TITAN_CPU_ISAS; up to {} here)",
                  forced, cpu_isa_name(best_supported_isa()));
      if (candidate != CpuIsa::avx512) cap_onednn(candidate);
      if (candidate == CpuIsa::avx512) cap_onednn_below_amx();
      return candidate;
    }
    fail("TITAN_CPU_ISA='{}': expected baseline, avx2 or avx512", forced);
  }();
  return isa;
}

void register_kernels() {
#define TITAN_CALL_BASELINE(name) baseline::register_##name();
#define TITAN_CALL_AVX2(name) avx2::register_##name();
#define TITAN_CALL_AVX512(name) avx512::register_##name();
  switch (selected_cpu_isa()) {
    case CpuIsa::baseline:
      TITAN_CPU_KERNEL_FILES(TITAN_CALL_BASELINE)
      break;
    case CpuIsa::avx2:
#if TITAN_BUILT_AVX2
      TITAN_CPU_KERNEL_FILES(TITAN_CALL_AVX2)
#endif
      break;
    case CpuIsa::avx512:
#if TITAN_BUILT_AVX512
      TITAN_CPU_KERNEL_FILES(TITAN_CALL_AVX512)
#endif
      break;
  }
#undef TITAN_CALL_BASELINE
#undef TITAN_CALL_AVX2
#undef TITAN_CALL_AVX512
#define TITAN_CALL_ONEDNN(name) register_##name();
  // oneDNN picks its own ISA, capped by selected_cpu_isa() when a set is forced.
  TITAN_CPU_ONEDNN_KERNEL_FILES(TITAN_CALL_ONEDNN)
#undef TITAN_CALL_ONEDNN
}

}  // namespace titan::ops::cpu
