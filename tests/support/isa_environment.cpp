// Selects the CPU kernel set under test from TITAN_CPU_ISA_TEST (set by CTest:
// each op and trainer test runs once per set). A set this CPU lacks is
// skipped, visibly. Each set gets its own temporary folder, because CTest runs
// the same test under two sets at once and both would use the same paths.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "titan/ops/cpu/isa.h"

namespace {

using titan::ops::cpu::CpuIsa;

class IsaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* requested = std::getenv("TITAN_CPU_ISA_TEST");
    if (requested == nullptr) return;  // run directly: the machine's default set
    for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
      if (std::string(requested) != titan::ops::cpu::cpu_isa_name(isa)) continue;
      if (!titan::ops::cpu::cpu_supports(isa)) {
        // A skip here stops every test before it starts, and GoogleTest then reports
        // "[  PASSED  ]" with no "[  SKIPPED ]" line of its own: print the marker
        // CTest's SKIP_REGULAR_EXPRESSION counts, so the skip is seen as one.
        std::printf("[  SKIPPED ] this CPU has no %s: those kernels cannot run here\n", requested);
        std::fflush(stdout);
        GTEST_SKIP() << "this CPU has no " << requested << "; those kernels cannot run here";
      }
    }
    setenv("TITAN_CPU_ISA", requested, 1);
    const std::filesystem::path temp =
        std::filesystem::path(::testing::TempDir()) / ("titan_" + std::string(requested));
    std::filesystem::create_directories(temp);
    setenv("TEST_TMPDIR", (temp.string() + "/").c_str(), 1);  // where ::testing::TempDir() points from now on
  }
};

const auto* const environment = ::testing::AddGlobalTestEnvironment(new IsaEnvironment);

}  // namespace
