// The host allocator's cache of large blocks: a freed large block serves the
// next request of its size, a request of another size returns cached blocks
// first (reserved never exceeds the peak of live bytes), small blocks go
// straight back, the cache is bounded by half the peak of live bytes, and
// reserved bytes count it.
#include <gtest/gtest.h>

#include <vector>

#include "titan/core/allocator.h"

namespace titan {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(CpuAllocator, ReusesAFreedLargeBlockOfTheSameSize) {
  CpuAllocator allocator;
  void* keep = allocator.allocate(64 * kMiB);  // raises the peak, so 8 MiB fit the cache
  void* first = allocator.allocate(8 * kMiB);
  allocator.deallocate(first, 8 * kMiB);
  EXPECT_EQ(allocator.stats().live_bytes, static_cast<int64_t>(64 * kMiB));
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(72 * kMiB));
  void* second = allocator.allocate(8 * kMiB);
  EXPECT_EQ(second, first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(second) % CpuAllocator::kAlignment, 0u);
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(72 * kMiB));
  // Another size is not served from the cache, and takes the cached block's place.
  allocator.deallocate(second, 8 * kMiB);
  void* other = allocator.allocate(12 * kMiB);
  EXPECT_EQ(allocator.stats().live_bytes, static_cast<int64_t>(76 * kMiB));
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(76 * kMiB));
  allocator.deallocate(other, 12 * kMiB);
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(64 * kMiB));
  allocator.deallocate(keep, 64 * kMiB);
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
}

TEST(CpuAllocator, CachesAtMostHalfThePeakAndNoSmallBlocks) {
  CpuAllocator allocator;
  void* small = allocator.allocate(kMiB);
  allocator.deallocate(small, kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
  // Peak 16 MiB: a freed 16 MiB block exceeds half of it and is returned.
  void* block = allocator.allocate(16 * kMiB);
  allocator.deallocate(block, 16 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
  // Two 8 MiB blocks (peak 16 MiB): one fits the 8 MiB cache, the other does not.
  void* a = allocator.allocate(8 * kMiB);
  void* b = allocator.allocate(8 * kMiB);
  allocator.deallocate(a, 8 * kMiB);
  allocator.deallocate(b, 8 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(8 * kMiB));
  EXPECT_GE(allocator.stats().peak_reserved_bytes, static_cast<int64_t>(16 * kMiB));
  allocator.release_cached();
}

TEST(CpuAllocator, ReservedNeverExceedsThePeakOfLiveBytes) {
  CpuAllocator allocator;
  // A step that frees blocks of some sizes and then needs others (FSDP's
  // gradient buckets, then the next unit's gathered weights).
  for (int step = 0; step < 3; ++step) {
    std::vector<std::pair<void*, size_t>> held;
    for (size_t mib : {40, 8, 24, 8, 40}) held.emplace_back(allocator.allocate(mib * kMiB), mib * kMiB);
    for (auto [ptr, bytes] : held) allocator.deallocate(ptr, bytes);
    void* a = allocator.allocate(36 * kMiB);
    void* b = allocator.allocate(60 * kMiB);
    const MemoryStats stats = allocator.stats();
    EXPECT_LE(stats.peak_reserved_bytes, stats.peak_bytes + static_cast<int64_t>(4 * kMiB)) << "step " << step;
    allocator.deallocate(a, 36 * kMiB);
    allocator.deallocate(b, 60 * kMiB);
  }
  allocator.release_cached();
}

}  // namespace
}  // namespace titan
