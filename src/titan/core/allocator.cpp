#include "titan/core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>

#include "titan/core/error.h"

namespace titan {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = size_t{4} << 10;

bool cached_size(size_t nbytes) { return nbytes >= CpuAllocator::kCachedBlock; }

size_t rounded_size(size_t nbytes) {
  const size_t alignment = nbytes >= CpuAllocator::kLargeBlock ? kHugePage
                           : cached_size(nbytes)               ? kPage
                                                               : CpuAllocator::kAlignment;
  return (nbytes + alignment - 1) / alignment * alignment;
}

// `rounded` bytes mapped from the system, 2 MiB aligned (and advised onto
// huge pages) from kLargeBlock up; nullptr when the system has none.
void* map_block(size_t rounded) {
  const bool huge = rounded >= CpuAllocator::kLargeBlock;
  const size_t slack = huge ? kHugePage : 0;
  void* mapped = mmap(nullptr, rounded + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  if (!huge) return mapped;
  // Trim the slack so the block starts on a 2 MiB boundary.
  const auto address = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (address + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > address) munmap(mapped, aligned - address);
  if (const size_t tail = address + rounded + slack - (aligned + rounded); tail > 0) {
    munmap(reinterpret_cast<void*>(aligned + rounded), tail);
  }
  // Advice only: where transparent huge pages are off, nothing changes.
  madvise(reinterpret_cast<void*>(aligned), rounded, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void unmap_block(void* ptr, size_t rounded) { munmap(ptr, rounded); }

}  // namespace

void* CpuAllocator::take_cached(size_t rounded) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  const auto found = cache_->blocks.find(rounded);
  if (found == cache_->blocks.end()) return nullptr;
  void* ptr = found->second;
  cache_->blocks.erase(found);
  cache_->bytes -= static_cast<int64_t>(rounded);
  return ptr;
}

// Returns cached blocks to the system, smallest first, until a fresh block of
// `rounded` bytes keeps reserved memory (live + cached) within the peak of
// live bytes plus an eighth: a request the cache cannot serve takes the place
// of blocks it holds rather than adding to them. (The eighth lets a step's
// mix of sizes, which exact-size reuse cannot all serve within the peak
// itself, stay cached: evicting down to the peak cost the debug model 15% of
// its throughput in page faults.)
void CpuAllocator::make_room(size_t rounded) {
  const int64_t live = live_.load(std::memory_order_relaxed);
  const int64_t peak = std::max(peak_.load(std::memory_order_relaxed), live + static_cast<int64_t>(rounded));
  const int64_t limit = peak + peak / 8;
  std::lock_guard<std::mutex> lock(cache_->mutex);
  while (!cache_->blocks.empty() && live + cache_->bytes + static_cast<int64_t>(rounded) > limit) {
    const auto smallest = cache_->blocks.begin();
    unmap_block(smallest->second, smallest->first);
    cache_->bytes -= static_cast<int64_t>(smallest->first);
    cache_->blocks.erase(smallest);
  }
}

void* CpuAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t rounded = rounded_size(nbytes);
  void* ptr = nullptr;
  if (!cached_size(nbytes)) {
    ptr = std::aligned_alloc(kAlignment, rounded);
  } else if ((ptr = take_cached(rounded)) == nullptr) {
    make_room(rounded);
    ptr = map_block(rounded);
    if (ptr == nullptr) {
      retries_.fetch_add(1, std::memory_order_relaxed);
      release_cached();
      ptr = map_block(rounded);
    }
  }
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
  live_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
  if (!cached_size(nbytes)) {
    std::free(ptr);
    return;
  }
  const size_t rounded = rounded_size(nbytes);
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->bytes + static_cast<int64_t>(rounded) <= static_cast<int64_t>(kMaxCachedBytes)) {
    cache_->blocks.emplace(rounded, ptr);
    cache_->bytes += static_cast<int64_t>(rounded);
    cache_->peak_reserved = std::max(cache_->peak_reserved, live_.load(std::memory_order_relaxed) + cache_->bytes);
    return;
  }
  unmap_block(ptr, rounded);
}

void CpuAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  for (auto& [size, ptr] : cache_->blocks) unmap_block(ptr, size);
  cache_->blocks.clear();
  cache_->bytes = 0;
}

MemoryStats CpuAllocator::stats() const {
  MemoryStats stats;
  stats.live_bytes = live_.load(std::memory_order_relaxed);
  stats.peak_bytes = peak_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(cache_->mutex);
  // Reserved: live, plus freed large blocks kept for reuse.
  stats.reserved_bytes = stats.live_bytes + cache_->bytes;
  stats.peak_reserved_bytes = std::max({cache_->peak_reserved, stats.peak_bytes, stats.reserved_bytes});
  stats.allocations = allocations_.load(std::memory_order_relaxed);
  stats.alloc_retries = retries_.load(std::memory_order_relaxed);
  return stats;
}

void CpuAllocator::reset_peak() {
  peak_.store(live_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->peak_reserved = live_.load(std::memory_order_relaxed) + cache_->bytes;
}

namespace {

std::array<Allocator*, kNumDeviceTypes>& allocator_table() {
  // Never destroyed: tensors freed during static destruction still need it.
  static CpuAllocator* const cpu_allocator = new CpuAllocator;
  static std::array<Allocator*, kNumDeviceTypes> table{cpu_allocator, nullptr, nullptr};
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
