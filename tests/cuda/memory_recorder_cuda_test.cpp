// The memory recorder on the GPU: CUDA allocations get their own timeline
// (sizes as requested, not the caching allocator's rounded blocks), and a
// request the device cannot hold leaves an out-of-memory snapshot naming it.
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/cuda.h"
#include "titan/core/memory_recorder.h"
#include "titan/core/trace_context.h"

namespace titan::testing {
namespace memory_recorder_cuda_test {

namespace fs = std::filesystem;

TEST(CudaMemoryRecorder, RecordsDeviceAllocationsOnTheirOwnTimeline) {
  TITAN_REQUIRE_CUDA();
  memory::RecordingScope scope(1000);
  std::optional<Tensor> a = Tensor::empty({1000}, DType::f32, Device::cuda());
  Tensor host = Tensor::empty({10});
  a.reset();
  const memory::Snapshot snapshot = memory::take();
  const memory::DeviceTimeline* cuda = snapshot.timeline(DeviceType::cuda);
  ASSERT_NE(cuda, nullptr);
  ASSERT_NE(snapshot.timeline(DeviceType::cpu), nullptr);
  EXPECT_EQ(cuda->peak_bytes, cuda->start_live_bytes + 4000);
  ASSERT_EQ(cuda->peak_blocks.size(), 1u);
  EXPECT_EQ(cuda->peak_blocks[0].bytes, 4000u);
  EXPECT_EQ(cuda->peak_blocks[0].device, Device::cuda());
  EXPECT_EQ(cuda->live_bytes, cuda->start_live_bytes);
}

TEST(CudaMemoryRecorder, OutOfDeviceMemoryWritesASnapshot) {
  TITAN_REQUIRE_CUDA();
  const fs::path folder = fs::temp_directory_path() / fmt::format("titan_cuda_oom_{}", getpid());
  fs::remove_all(folder);
  static const std::string fqn = "layers.7.feed_forward.w1";
  memory::set_out_of_memory_dump(folder.string(), "rank0");
  {
    memory::RecordingScope scope(100);
    trace::ModuleScope module(&fqn);
    // 4 TiB: more than any GPU holds.
    EXPECT_THROW(Tensor::empty({int64_t{1} << 40}, DType::f32, Device::cuda()), Error);
  }
  memory::set_out_of_memory_dump("", "");
  std::ifstream in(folder / "rank0_oom.json");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str());
  EXPECT_EQ(json["failure"]["bytes"], (size_t{1} << 40) * 4);
  EXPECT_EQ(json["failure"]["device"], "cuda:0");
  EXPECT_EQ(json["failure"]["module"], fqn);
  EXPECT_NE(json["failure"]["error"].get<std::string>().find("out of device memory"), std::string::npos);
  EXPECT_TRUE(fs::exists(folder / "rank0_oom.html"));
  fs::remove_all(folder);
}

}  // namespace memory_recorder_cuda_test
}  // namespace titan::testing
