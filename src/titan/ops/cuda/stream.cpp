#include "titan/ops/cuda/stream.h"

#include <atomic>
#include <mutex>

#include "titan/ops/cuda/cuda_check.h"

namespace titan::ops::cuda {
namespace {

thread_local cudaStream_t current = nullptr;
thread_local bool has_current = false;

// One non-blocking compute stream for the process: the legacy default stream
// cannot be captured into a CUDA graph and would serialise with every other
// stream, so no kernel or copy of ours goes there.
cudaStream_t default_stream() {
  static cudaStream_t stream = create_nonblocking_stream();
  return stream;
}

}  // namespace

cudaStream_t create_nonblocking_stream() {
  cudaStream_t created = nullptr;
  TITAN_CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
  return created;
}

cudaStream_t current_stream() { return has_current ? current : default_stream(); }

void set_current_stream(cudaStream_t stream) {
  current = stream;
  has_current = stream != nullptr;
}

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, sms = 0;
    TITAN_CUDA_CHECK(cudaGetDevice(&device));
    TITAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

int compute_capability() {
  // Cached per device (it cannot change under a process); atomic because
  // launches may come from several host threads.
  static std::atomic<int> capability_of[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0;
  int capability = capability_of[device].load(std::memory_order_relaxed);
  if (capability == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      return 0;
    }
    capability = 10 * major + minor;
    capability_of[device].store(capability, std::memory_order_relaxed);
  }
  return capability;
}

}  // namespace titan::ops::cuda
