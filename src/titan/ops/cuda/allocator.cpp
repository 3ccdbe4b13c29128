// The CUDA device allocator: the caching, stream-ordered allocator over
// cudaMalloc/cudaFree, keyed by the calling thread's current stream. Steady-
// state training steps then allocate nothing from the driver, which is also
// what lets a captured CUDA graph replay with the same addresses.
#include "titan/ops/cuda/allocator.h"

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

class CudaSegmentSource final : public SegmentSource {
 public:
  void* allocate_segment(size_t nbytes) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the retry starts clean
      return nullptr;
    }
    TITAN_CUDA_CHECK(status);
    return ptr;
  }
  void free_segment(void* ptr, size_t /*nbytes*/) override {
    // cudaFree waits for the device, so no kernel still uses the segment.
    TITAN_CUDA_CHECK(cudaFree(ptr));
  }
  int64_t capacity_bytes() const override {
    static const int64_t total = [] {
      size_t free = 0, bytes = 0;
      TITAN_CUDA_CHECK(cudaMemGetInfo(&free, &bytes));
      return static_cast<int64_t>(bytes);
    }();
    return total;
  }
};

}  // namespace

CachingAllocator& caching_allocator() {
  // Never destroyed: tensors in static storage may free into it during exit,
  // after the CUDA runtime itself has shut down.
  static auto* allocator = new CachingAllocator(std::make_unique<CudaSegmentSource>(), [] {
    return reinterpret_cast<CachingAllocator::StreamKey>(current_stream());
  });
  return *allocator;
}

Allocator* cuda_allocator() { return &caching_allocator(); }

}  // namespace titan::ops::cuda
