#include "titan/core/allocator.h"

#include <sys/mman.h>

#include <array>
#include <cstdlib>

#include "titan/core/error.h"

namespace titan {

namespace {

// Large host tensors (weights, their gradients, big activations) are freed and
// allocated again every step, and each time the kernel faults their pages in
// one 4 KiB page at a time. Backed by 2 MiB transparent huge pages they fault
// 512 times less often (a MoE layer's expert gradients, 2.4 GB at the
// Qwen3-30B-A3B shape, spent most of their time in page faults).
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugePageMinimum = 2 * kHugePage;

}  // namespace

void* CpuAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const bool huge = nbytes >= kHugePageMinimum;
  const size_t alignment = huge ? kHugePage : kAlignment;
  const size_t rounded = (nbytes + alignment - 1) / alignment * alignment;
  void* ptr = std::aligned_alloc(alignment, rounded);
  // Advice only: where transparent huge pages are off, nothing changes.
  if (huge && ptr != nullptr) madvise(ptr, rounded, MADV_HUGEPAGE);
  if (ptr == nullptr) {
    fail("out of host memory allocating {} bytes ({} live); `titan estimate-memory` shows what a job needs", nbytes,
         live_.load(std::memory_order_relaxed));
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  const int64_t live =
      live_.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed) + static_cast<int64_t>(nbytes);
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  return ptr;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  live_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
}

MemoryStats CpuAllocator::stats() const {
  MemoryStats stats;
  stats.live_bytes = live_.load(std::memory_order_relaxed);
  stats.peak_bytes = peak_.load(std::memory_order_relaxed);
  // Freed host memory goes straight back to the system: reserved is live.
  stats.reserved_bytes = stats.live_bytes;
  stats.peak_reserved_bytes = stats.peak_bytes;
  stats.allocations = allocations_.load(std::memory_order_relaxed);
  return stats;
}

void CpuAllocator::reset_peak() { peak_.store(live_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

namespace {

std::array<Allocator*, kNumDeviceTypes>& allocator_table() {
  static CpuAllocator cpu_allocator;
  static std::array<Allocator*, kNumDeviceTypes> table{&cpu_allocator, nullptr, nullptr};
  return table;
}

}  // namespace

Allocator& allocator_for(DeviceType type) {
  Allocator* allocator = allocator_table()[static_cast<size_t>(type)];
  TITAN_CHECK(allocator != nullptr,
              "no allocator for device type '{}' (is the backend compiled in and a device present?)",
              device_type_name(type));
  return *allocator;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  allocator_table()[static_cast<size_t>(type)] = allocator;
}

MemoryStats memory_stats(DeviceType type) {
  Allocator* allocator = allocator_table()[static_cast<size_t>(type)];
  return allocator ? allocator->stats() : MemoryStats{};
}

}  // namespace titan
