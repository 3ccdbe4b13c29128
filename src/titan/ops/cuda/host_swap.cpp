// Activation offload's copies on CUDA: pinned host buffers (the DMA engines
// read and write them directly, so copies run beside kernels at bus speed)
// and a side stream ordered against the compute stream with events.
#include "titan/core/host_swap.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

std::shared_ptr<void> record_event(cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  TITAN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  TITAN_CUDA_CHECK(cudaEventRecord(event, stream));
  return {event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }};
}

class CudaSwapEngine final : public HostSwapEngine {
 public:
  void* allocate_host(size_t nbytes) override {
    void* ptr = nullptr;
    TITAN_CUDA_CHECK(cudaHostAlloc(&ptr, nbytes == 0 ? 1 : nbytes, cudaHostAllocDefault));
    return ptr;
  }
  void free_host(void* ptr) override { TITAN_CUDA_CHECK(cudaFreeHost(ptr)); }
  void after_compute() override {
    const std::shared_ptr<void> computed = record_event(current_stream());
    TITAN_CUDA_CHECK(cudaStreamWaitEvent(side(), static_cast<cudaEvent_t>(computed.get()), 0));
  }
  void copy_to_host(void* host, const void* device, size_t nbytes) override {
    TITAN_CUDA_CHECK(cudaMemcpyAsync(host, device, nbytes, cudaMemcpyDeviceToHost, side()));
  }
  void copy_to_device(void* device, const void* host, size_t nbytes) override {
    TITAN_CUDA_CHECK(cudaMemcpyAsync(device, host, nbytes, cudaMemcpyHostToDevice, side()));
  }
  std::shared_ptr<void> mark() override { return record_event(side()); }
  void host_wait(const std::shared_ptr<void>& marker) override {
    if (marker) TITAN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(marker.get())));
  }
  void compute_wait(const std::shared_ptr<void>& marker) override {
    if (marker) TITAN_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), static_cast<cudaEvent_t>(marker.get()), 0));
  }

 private:
  static cudaStream_t side() {
    static cudaStream_t stream = create_nonblocking_stream();
    return stream;
  }
};

}  // namespace

void register_host_swap() {
  static CudaSwapEngine engine;
  register_host_swap_engine(DeviceType::cuda, &engine);
}

}  // namespace titan::ops::cuda
