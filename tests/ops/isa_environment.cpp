// Selects the CPU kernel set under test from TITAN_CPU_ISA_TEST (set by CTest:
// each op test runs once per set). The AVX-512 run is skipped, visibly, on
// CPUs without AVX-512.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "titan/ops/cpu/isa.h"

namespace {

class IsaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* requested = std::getenv("TITAN_CPU_ISA_TEST");
    if (requested == nullptr) return;  // run directly: the machine's default set
    if (std::string(requested) == "avx512" && !titan::ops::cpu::cpu_has_avx512()) {
      GTEST_SKIP() << "this CPU has no AVX-512; the AVX-512 kernels cannot run here";
    }
    setenv("TITAN_CPU_ISA", requested, 1);
  }
};

const auto* const environment = ::testing::AddGlobalTestEnvironment(new IsaEnvironment);

}  // namespace
