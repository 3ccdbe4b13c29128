#include "titan/core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>

#include "titan/core/error.h"

namespace titan {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t rounded_size(size_t nbytes) {
  const size_t alignment = nbytes >= CpuAllocator::kLargeBlock ? kHugePage : CpuAllocator::kAlignment;
  return (nbytes + alignment - 1) / alignment * alignment;
}

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

// Returns cached blocks to the system, smallest first, until `rounded` bytes
// are freed or the cache is empty: a request the cache cannot serve takes
// the place of blocks it holds rather than adding to them, so reserved
// memory (live + cached) never rises above the peak of live bytes.
void CpuAllocator::make_room(size_t rounded) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  size_t freed = 0;
  while (freed < rounded && !cache_->blocks.empty()) {
    const auto smallest = cache_->blocks.begin();
    std::free(smallest->second);
    freed += smallest->first;
    cache_->bytes -= static_cast<int64_t>(smallest->first);
    cache_->blocks.erase(smallest);
  }
}

void* CpuAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const bool large = nbytes >= kLargeBlock;
  const size_t rounded = rounded_size(nbytes);
  void* ptr = large ? take_cached(rounded) : nullptr;
  if (ptr == nullptr) {
    if (large) make_room(rounded);
    ptr = std::aligned_alloc(large ? kHugePage : kAlignment, rounded);
    if (ptr == nullptr && large) {
      retries_.fetch_add(1, std::memory_order_relaxed);
      release_cached();
      ptr = std::aligned_alloc(kHugePage, rounded);
    }
    if (ptr == nullptr) {
      fail("out of host memory allocating {} bytes ({} live); `titan estimate-memory` shows what a job needs", nbytes,
           live_.load(std::memory_order_relaxed));
    }
    // Advice only: where transparent huge pages are off, nothing changes.
    if (large) madvise(ptr, rounded, MADV_HUGEPAGE);
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
  if (nbytes >= kLargeBlock) {
    const size_t rounded = rounded_size(nbytes);
    std::lock_guard<std::mutex> lock(cache_->mutex);
    // Bounded by half the peak of live bytes as well, so a process whose sizes
    // keep changing holds at most 1.5x its own peak.
    const int64_t limit = std::min(static_cast<int64_t>(kMaxCachedBytes), peak_.load(std::memory_order_relaxed) / 2);
    if (cache_->bytes + static_cast<int64_t>(rounded) <= limit) {
      cache_->blocks.emplace(rounded, ptr);
      cache_->bytes += static_cast<int64_t>(rounded);
      cache_->peak_reserved = std::max(cache_->peak_reserved, live_.load(std::memory_order_relaxed) + cache_->bytes);
      return;
    }
  }
  std::free(ptr);
}

void CpuAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  for (auto& [size, ptr] : cache_->blocks) std::free(ptr);
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
