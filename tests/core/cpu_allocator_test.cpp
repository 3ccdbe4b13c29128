// The host allocator's cache of blocks from 256 KiB: a freed block serves
// the next request of its size, a request of another size returns cached
// blocks first (reserved stays within the peak of live bytes and an eighth), smaller
// blocks go straight back, and reserved bytes count the cache.
#include <gtest/gtest.h>

#include <vector>

#include "titan/core/allocator.h"

namespace titan {
namespace cpu_allocator_test {

constexpr size_t kMiB = size_t{1} << 20;

TEST(CpuAllocator, ReusesAFreedLargeBlockOfTheSameSize) {
  CpuAllocator allocator;
  void* keep = allocator.allocate(16 * kMiB);
  void* first = allocator.allocate(8 * kMiB);
  allocator.deallocate(first, 8 * kMiB);
  EXPECT_EQ(allocator.stats().live_bytes, static_cast<int64_t>(16 * kMiB));
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(24 * kMiB));
  void* second = allocator.allocate(8 * kMiB);
  EXPECT_EQ(second, first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(second) % CpuAllocator::kAlignment, 0u);
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(24 * kMiB));
  // Another size is not served from the cache, and takes the cached block's
  // place: keeping it would reserve 36 MiB, over the new peak (28) and its eighth.
  allocator.deallocate(second, 8 * kMiB);
  void* other = allocator.allocate(12 * kMiB);
  EXPECT_EQ(allocator.stats().live_bytes, static_cast<int64_t>(28 * kMiB));
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(28 * kMiB));
  allocator.deallocate(other, 12 * kMiB);
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(16 * kMiB));
  allocator.deallocate(keep, 16 * kMiB);
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
}

TEST(CpuAllocator, CachesBlocksFrom256KiBAndReturnsSmallerOnes) {
  CpuAllocator allocator;
  void* small = allocator.allocate(CpuAllocator::kCachedBlock - 64);
  allocator.deallocate(small, CpuAllocator::kCachedBlock - 64);
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
  // A 1 MiB activation: page-aligned, kept, and handed out again.
  void* block = allocator.allocate(kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % 4096, 0u);
  allocator.deallocate(block, kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, static_cast<int64_t>(kMiB));
  EXPECT_EQ(allocator.allocate(kMiB), block);
  allocator.deallocate(block, kMiB);
  // Large blocks start on a 2 MiB (huge page) boundary.
  void* large = allocator.allocate(6 * kMiB + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large) % (2 * kMiB), 0u);
  static_cast<char*>(large)[6 * kMiB] = 1;  // the last byte is ours
  allocator.deallocate(large, 6 * kMiB + 1);
  allocator.release_cached();
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
}

TEST(CpuAllocator, ReservedStaysWithinThePeakOfLiveBytesAndAnEighth) {
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
    EXPECT_LE(stats.peak_reserved_bytes, stats.peak_bytes + stats.peak_bytes / 8) << "step " << step;
    allocator.deallocate(a, 36 * kMiB);
    allocator.deallocate(b, 60 * kMiB);
  }
  allocator.release_cached();
}

}  // namespace cpu_allocator_test
}  // namespace titan
