#include "titan/core/host_swap.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "titan/core/error.h"

namespace titan {
namespace {

// The CPU's "device" memory is host memory already: copies are plain and
// finished when they return, so every ordering call is a no-op.
class CpuSwapEngine final : public HostSwapEngine {
 public:
  void* allocate_host(size_t nbytes) override {
    void* ptr = std::malloc(nbytes == 0 ? 1 : nbytes);
    TITAN_CHECK(ptr != nullptr, "activation offload: out of host memory for {} bytes", nbytes);
    return ptr;
  }
  void free_host(void* ptr) override { std::free(ptr); }
  void after_compute() override {}
  void copy_to_host(void* host, const void* device, size_t nbytes) override { std::memcpy(host, device, nbytes); }
  void copy_to_device(void* device, const void* host, size_t nbytes) override { std::memcpy(device, host, nbytes); }
  std::shared_ptr<void> mark() override { return nullptr; }
  void host_wait(const std::shared_ptr<void>&) override {}
  void compute_wait(const std::shared_ptr<void>&) override {}
};

std::array<HostSwapEngine*, kNumDeviceTypes>& engines() {
  static CpuSwapEngine cpu;
  static std::array<HostSwapEngine*, kNumDeviceTypes> table{&cpu, nullptr, nullptr};
  return table;
}

}  // namespace

HostSwapEngine& host_swap_engine(DeviceType type) {
  HostSwapEngine* engine = engines()[static_cast<size_t>(type)];
  TITAN_CHECK(engine != nullptr, "activation offload: no host copy engine for device type {}", device_type_name(type));
  return *engine;
}

void register_host_swap_engine(DeviceType type, HostSwapEngine* engine) {
  engines()[static_cast<size_t>(type)] = engine;
}

}  // namespace titan
