// cuBLASLt is opened at its first use, not at start-up (ops/cuda/cublaslt_on_demand.cpp).
// Needs no GPU: a status name is answered by the library without a device.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace titan::testing {
namespace cublaslt_on_demand_test {

bool cublaslt_is_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libcublasLt") != std::string::npos) return true;
  }
  return false;
}

// Read during static initialisation, before any test of this binary ran a GEMM.
const bool kMappedAtStart = cublaslt_is_mapped();

TEST(CublasLtOnDemand, IsOpenedByTheFirstCallNotAtStart) {
  EXPECT_FALSE(kMappedAtStart) << "libcublasLt was loaded with the program";
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_TRUE(cublaslt_is_mapped());
}

}  // namespace cublaslt_on_demand_test
}  // namespace titan::testing
