// The caching allocator's bookkeeping, over a fake device: host memory with a
// capacity, counting every segment request, so reuse, splitting, merging,
// stream separation and the out-of-memory retry are all observable.
#include "titan/core/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>

#include "support/expect_error.h"

namespace titan {
namespace caching_allocator_test {

struct FakeDevice {
  size_t capacity = size_t{1} << 30;
  size_t used = 0;
  int segment_allocations = 0;
  int segment_frees = 0;
  std::map<void*, size_t> segments;
};

class FakeSource final : public SegmentSource {
 public:
  explicit FakeSource(FakeDevice& device) : device_(device) {}
  void* allocate_segment(size_t nbytes) override {
    if (device_.used + nbytes > device_.capacity) return nullptr;
    void* ptr = std::malloc(nbytes);
    device_.used += nbytes;
    ++device_.segment_allocations;
    device_.segments[ptr] = nbytes;
    return ptr;
  }
  void free_segment(void* ptr, size_t nbytes) override {
    EXPECT_EQ(device_.segments.at(ptr), nbytes);
    device_.segments.erase(ptr);
    device_.used -= nbytes;
    ++device_.segment_frees;
    std::free(ptr);
  }

 private:
  FakeDevice& device_;
};

constexpr size_t kMiB = size_t{1} << 20;

struct Fixture {
  FakeDevice device;
  CachingAllocator::StreamKey stream = 1;
  CachingAllocator allocator{std::make_unique<FakeSource>(device), [this] { return stream; }};
};

TEST(CachingAllocator, ReusesAFreedBlockWithoutAskingTheDevice) {
  Fixture f;
  void* a = f.allocator.allocate(3 * kMiB);
  f.allocator.deallocate(a, 3 * kMiB);
  void* b = f.allocator.allocate(3 * kMiB);
  EXPECT_EQ(a, b);
  EXPECT_EQ(f.device.segment_allocations, 1);
  f.allocator.deallocate(b, 3 * kMiB);
}

TEST(CachingAllocator, SmallRequestsShareOneSegmentAndDoNotOverlap) {
  Fixture f;
  std::vector<char*> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(static_cast<char*>(f.allocator.allocate(1000)));
  EXPECT_EQ(f.device.segment_allocations, 1);  // 100 x 1024 rounded bytes fit one 2 MiB segment
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) EXPECT_GE(blocks[i] - blocks[i - 1], 1024);
  for (char* p : blocks) f.allocator.deallocate(p, 1000);
  EXPECT_EQ(f.allocator.stats().live_bytes, 0);
}

TEST(CachingAllocator, FreedNeighboursMergeSoALargerRequestFits) {
  Fixture f;
  // Three 4 MiB blocks carved from one 20 MiB segment.
  void* a = f.allocator.allocate(4 * kMiB);
  void* b = f.allocator.allocate(4 * kMiB);
  void* c = f.allocator.allocate(4 * kMiB);
  ASSERT_EQ(f.device.segment_allocations, 1);
  f.allocator.deallocate(a, 4 * kMiB);
  f.allocator.deallocate(b, 4 * kMiB);
  // 8 MiB fits only in a and b merged.
  void* d = f.allocator.allocate(8 * kMiB);
  EXPECT_EQ(d, a);
  EXPECT_EQ(f.device.segment_allocations, 1);
  f.allocator.deallocate(c, 4 * kMiB);
  f.allocator.deallocate(d, 8 * kMiB);
  f.allocator.empty_cache();
  EXPECT_EQ(f.device.segment_frees, 1);  // all merged back into one whole segment
  EXPECT_EQ(f.allocator.stats().reserved_bytes, 0);
}

TEST(CachingAllocator, BlocksAreNotReusedAcrossStreams) {
  Fixture f;
  void* a = f.allocator.allocate(3 * kMiB);
  f.allocator.deallocate(a, 3 * kMiB);
  f.stream = 2;
  void* b = f.allocator.allocate(3 * kMiB);
  EXPECT_NE(a, b);
  EXPECT_EQ(f.device.segment_allocations, 2);
  f.allocator.deallocate(b, 3 * kMiB);
  f.stream = 1;
  void* again = f.allocator.allocate(3 * kMiB);
  EXPECT_EQ(again, a);
  f.allocator.deallocate(again, 3 * kMiB);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  Fixture f;
  f.device.capacity = 64 * kMiB;
  void* a = f.allocator.allocate(40 * kMiB);
  f.allocator.deallocate(a, 40 * kMiB);  // cached, still reserved
  void* b = f.allocator.allocate(50 * kMiB);
  ASSERT_NE(b, nullptr);
  MemoryStats stats = f.allocator.stats();
  EXPECT_EQ(stats.alloc_retries, 1);
  EXPECT_EQ(stats.reserved_bytes, static_cast<int64_t>(50 * kMiB));
  EXPECT_EQ(f.device.segment_frees, 1);
  // Nothing left to release: a clear error naming the sizes, and the allocator still works.
  testing::expect_error([&] { f.allocator.allocate(30 * kMiB); }, {"out of device memory"});
  EXPECT_EQ(f.allocator.stats().alloc_retries, 2);
  f.allocator.deallocate(b, 50 * kMiB);
  void* c = f.allocator.allocate(30 * kMiB);
  EXPECT_NE(c, nullptr);
  f.allocator.deallocate(c, 30 * kMiB);
}

TEST(CachingAllocator, StatisticsTrackLiveReservedAndPeaks) {
  Fixture f;
  void* a = f.allocator.allocate(12 * kMiB);  // own segment, rounded to 2 MiB multiples
  void* b = f.allocator.allocate(100);
  MemoryStats stats = f.allocator.stats();
  EXPECT_EQ(stats.live_bytes, static_cast<int64_t>(12 * kMiB + 512));
  EXPECT_EQ(stats.reserved_bytes, static_cast<int64_t>(12 * kMiB + 2 * kMiB));
  EXPECT_EQ(stats.allocations, 2);
  f.allocator.deallocate(a, 12 * kMiB);
  stats = f.allocator.stats();
  EXPECT_EQ(stats.live_bytes, 512);
  EXPECT_EQ(stats.peak_bytes, static_cast<int64_t>(12 * kMiB + 512));
  f.allocator.reset_peak();
  EXPECT_EQ(f.allocator.stats().peak_bytes, 512);
  f.allocator.deallocate(b, 100);
}

// A recording's memory: reused inside the recording, never handed to eager
// allocations afterwards (a replay would overwrite them).
TEST(CachingAllocator, PrivatePoolBlocksStayWithTheirPool) {
  Fixture f;
  void* eager = f.allocator.allocate(3 * kMiB);
  f.allocator.deallocate(eager, 3 * kMiB);
  f.allocator.begin_private_pool(7);
  void* recorded = f.allocator.allocate(3 * kMiB);
  EXPECT_NE(recorded, eager);  // the stream's cached block is not the pool's
  f.allocator.deallocate(recorded, 3 * kMiB);
  EXPECT_EQ(f.allocator.allocate(3 * kMiB), recorded);  // reused within the recording
  f.allocator.deallocate(recorded, 3 * kMiB);           // free again, in the private pool's list
  f.allocator.end_private_pool();
  void* after = f.allocator.allocate(3 * kMiB);
  EXPECT_EQ(after, eager);
  void* more = f.allocator.allocate(3 * kMiB);
  EXPECT_NE(more, recorded);
  f.allocator.deallocate(after, 3 * kMiB);
  f.allocator.deallocate(more, 3 * kMiB);
  f.allocator.begin_private_pool(9);
  testing::expect_error([&] { f.allocator.begin_private_pool(11); }, {"already active"});
  f.allocator.end_private_pool();
}

TEST(CachingAllocator, FreeingAForeignPointerIsAnError) {
  Fixture f;
  int local = 0;
  testing::expect_error([&] { f.allocator.deallocate(&local, 4); }, {"did not allocate"});
}

// Random allocate/free traffic on two streams: blocks never overlap, their
// first and last bytes keep what was written, live bytes return to zero and the cache empties completely.
TEST(CachingAllocator, RandomTrafficNeverOverlapsAndEmptiesCompletely) {
  Fixture f;
  std::mt19937_64 rng(42);
  std::map<char*, size_t> live;
  for (int i = 0; i < 3000; ++i) {
    f.stream = 1 + rng() % 2;
    if (!live.empty() && (rng() % 2 == 0 || live.size() > 40)) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_EQ(it->first[0], static_cast<char>(it->second));
      ASSERT_EQ(it->first[it->second - 1], static_cast<char>(it->second));
      f.allocator.deallocate(it->first, it->second);
      live.erase(it);
      continue;
    }
    const size_t size = rng() % 2 ? 1 + rng() % 4096 : 1 + rng() % (24 * kMiB);
    char* p = static_cast<char*>(f.allocator.allocate(size));
    auto next = live.lower_bound(p);
    if (next != live.end()) {
      ASSERT_LE(p + size, next->first);
    }
    if (next != live.begin()) {
      ASSERT_LE(std::prev(next)->first + std::prev(next)->second, p);
    }
    p[0] = p[size - 1] = static_cast<char>(size);
    live.emplace(p, size);
  }
  for (auto& [p, size] : live) f.allocator.deallocate(p, size);
  EXPECT_EQ(f.allocator.stats().live_bytes, 0);
  f.allocator.empty_cache();
  EXPECT_EQ(f.allocator.stats().reserved_bytes, 0);
  EXPECT_EQ(f.device.used, 0u);
}

}  // namespace caching_allocator_test
}  // namespace titan
