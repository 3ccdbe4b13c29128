// The CPU kernel sets one binary carries (portable x86-64, AVX2+FMA, AVX-512),
// which one this machine runs, and its name for logs and benchmarks.
#pragma once

namespace titan::ops::cpu {

enum class CpuIsa { baseline, avx2, avx512 };

const char* cpu_isa_name(CpuIsa isa);
// Whether this CPU (per CPUID) can run the kernel set.
bool cpu_supports(CpuIsa isa);
// The set in use: the best this CPU supports, or TITAN_CPU_ISA's choice, which
// also caps oneDNN at the same ISA so that a forced set emulates such a CPU.
CpuIsa selected_cpu_isa();
inline const char* selected_isa() { return cpu_isa_name(selected_cpu_isa()); }

}  // namespace titan::ops::cpu
