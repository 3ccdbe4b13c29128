// A caching, stream-ordered allocator for devices whose raw allocation is
// slow and synchronising (cudaMalloc/cudaFree). Memory comes from the device
// in segments and is handed out as blocks; a freed block goes back to a free
// list and is reused by the next request of a fitting size on the same stream,
// so steady-state training allocates nothing from the device.
//
// Stream order: a block freed on stream S may be reused at once by work on S
// (the device runs S's work in order), never by another stream. A tensor used
// on a second stream must be kept alive by its user until that stream is done.
//
// Device-agnostic: the device side is a SegmentSource, so the bookkeeping is
// tested on the CPU with a fake source (tests/core/caching_allocator_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "titan/core/allocator.h"

namespace titan {

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // nullptr when the device is out of memory (the allocator then releases its
  // cache and retries once); other failures throw.
  virtual void* allocate_segment(size_t nbytes) = 0;
  virtual void free_segment(void* ptr, size_t nbytes) = 0;
  // The device's total memory, for reports (0: unknown).
  virtual int64_t capacity_bytes() const { return 0; }
};

class CachingAllocator final : public Allocator {
 public:
  // Requests up to kSmallLimit bytes share kSmallSegment-byte segments, so
  // small tensors do not fragment the large pool; larger ones get segments of
  // their own size (rounded up to kLargeRounding), at least kLargeSegment for
  // mid-sized requests so several of them share one device allocation.
  static constexpr size_t kMinBlock = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeSegment = size_t{20} << 20;
  static constexpr size_t kLargeRounding = size_t{2} << 20;
  static constexpr size_t kMidLimit = size_t{10} << 20;

  using StreamKey = uintptr_t;
  // `current_stream` names the stream the calling thread allocates for.
  CachingAllocator(std::unique_ptr<SegmentSource> source, std::function<StreamKey()> current_stream);
  ~CachingAllocator() override;

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  // Returns every wholly free segment to the device.
  void empty_cache();
  // Until end_private_pool(), every allocation draws from (and its block
  // returns to) the pool keyed `pool` instead of the current stream's: the
  // memory of a captured graph, which eager work must never be handed since
  // each replay writes it. Blocks freed while recording are reused by later
  // allocations of the same recording, which replays in the same order.
  void begin_private_pool(StreamKey pool);
  void end_private_pool();

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeList = std::set<Block*, BySize>;

  static size_t round_size(size_t nbytes);
  static size_t segment_size_for(size_t rounded);
  FreeList& pool_for(size_t rounded) { return rounded <= kSmallLimit ? small_free_ : large_free_; }
  Block* find_free(size_t rounded, StreamKey stream);
  Block* new_segment(size_t rounded, StreamKey stream);
  Block* split(Block* block, size_t rounded);
  void release_free_segments();  // caller holds mutex_
  void note_live_change(int64_t delta);

  std::unique_ptr<SegmentSource> source_;
  std::function<StreamKey()> current_stream_;
  std::optional<StreamKey> private_pool_;
  mutable std::mutex mutex_;
  FreeList small_free_, large_free_;
  std::unordered_map<void*, Block*> live_blocks_;
  MemoryStats stats_;
};

}  // namespace titan
