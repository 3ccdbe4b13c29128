#include <cstring>

#include "support/cuda.h"

namespace titan::testing {
namespace device_test {

TEST(CudaDevice, RoundTripThroughTheDeviceKeepsEveryBit) {
  TITAN_REQUIRE_CUDA();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor host = random_cpu({257, 33}, dtype, 7);
    const Tensor back = on_cpu(on_cuda(host));
    ASSERT_EQ(std::memcmp(back.data_ptr(), host.data_ptr(), host.nbytes()), 0) << dtype_name(dtype);
  }
}

}  // namespace device_test
}  // namespace titan::testing
