// The profiler on CUDA: each op's kernels are timed on the device (a "kernel"
// span per op on the "cuda stream" track), alongside its host span.
#include <gtest/gtest.h>

#include "support/cuda.h"
#include "titan/core/profiler.h"
#include "titan/ops/gemm.h"

namespace titan {
namespace profiler_timer_test {

using testing::on_cuda;
using testing::random_cpu;

TEST(CudaProfilerTimer, EachOpGetsADeviceSpanInsideTheProfiledStretch) {
  TITAN_REQUIRE_CUDA();
  const Tensor a = on_cuda(random_cpu({512, 512}, DType::f32, 1));
  const Tensor b = on_cuda(random_cpu({512, 512}, DType::f32, 2));
  profiler::DeviceTimer* timer = profiler::device_timer(DeviceType::cuda);
  ASSERT_NE(timer, nullptr);
  profiler::start();
  const double begin = profiler::now_us();
  for (int i = 0; i < 3; ++i) ops::matmul(a, b);
  std::vector<profiler::Event> kernels = timer->collect();
  const double end = profiler::now_us();
  const std::vector<profiler::Event> host = profiler::stop();
  int64_t gemms = 0;
  for (const profiler::Event& e : host) gemms += e.category == "op" && e.name == "gemm";
  ASSERT_EQ(gemms, 3);
  ASSERT_EQ(static_cast<int64_t>(kernels.size()), gemms);
  for (const profiler::Event& k : kernels) {
    EXPECT_EQ(k.category, "kernel");
    EXPECT_EQ(k.thread, profiler::kDeviceTracks);
    EXPECT_GT(k.duration_us, 0.0);
    // The device's axis sits on the host's: within the stretch (with a launch latency of slack).
    EXPECT_GE(k.start_us, begin - 1000.0);
    EXPECT_LE(k.start_us + k.duration_us, end + 1000.0);
  }
}

}  // namespace profiler_timer_test
}  // namespace titan
