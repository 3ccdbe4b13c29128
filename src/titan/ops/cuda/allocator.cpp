// The CUDA device allocator: plain cudaMalloc/cudaFree with exact live and
// peak statistics. (A caching, stream-ordered allocator replaces it with the
// CUDA backend work; the interface stays the same.)
#include <atomic>

#include "titan/core/allocator.h"
#include "titan/ops/cuda/cuda_check.h"

namespace titan::ops::cuda {
namespace {

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    void* ptr = nullptr;
    TITAN_CUDA_CHECK(cudaMalloc(&ptr, nbytes));
    allocations_.fetch_add(1);
    const int64_t live = live_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    cudaFree(ptr);
    live_.fetch_sub(static_cast<int64_t>(nbytes));
  }
  MemoryStats stats() const override {
    MemoryStats stats;
    stats.live_bytes = live_.load();
    stats.peak_bytes = peak_.load();
    stats.reserved_bytes = stats.live_bytes;
    stats.peak_reserved_bytes = stats.peak_bytes;
    stats.allocations = allocations_.load();
    return stats;
  }
  void reset_peak() override { peak_.store(live_.load()); }

 private:
  std::atomic<int64_t> live_{0}, peak_{0}, allocations_{0};
};

}  // namespace

Allocator* cuda_allocator() {
  static CudaAllocator allocator;
  return &allocator;
}

}  // namespace titan::ops::cuda
