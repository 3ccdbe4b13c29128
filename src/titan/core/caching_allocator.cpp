#include "titan/core/caching_allocator.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "titan/core/error.h"

namespace titan {

// A contiguous piece of a segment. Blocks of one segment form a doubly linked
// list in address order, so a freed block merges with free neighbours and a
// segment whose single block is free can go back to the device.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamKey stream = 0;
  bool free = true;
  bool small = false;  // from a small-pool segment
  Block* prev = nullptr;
  Block* next = nullptr;

  bool whole_segment() const { return prev == nullptr && next == nullptr; }
};

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<SegmentSource> source, std::function<StreamKey()> current_stream)
    : source_(std::move(source)), current_stream_(std::move(current_stream)) {}

CachingAllocator::~CachingAllocator() {
  // Live blocks at exit belong to tensors that outlive the allocator (statics);
  // their segments are left to the process teardown.
  std::lock_guard<std::mutex> lock(mutex_);
  release_free_segments();
}

size_t CachingAllocator::round_size(size_t nbytes) {
  return std::max(kMinBlock, (nbytes + kMinBlock - 1) / kMinBlock * kMinBlock);
}

size_t CachingAllocator::segment_size_for(size_t rounded) {
  if (rounded <= kSmallLimit) return kSmallSegment;
  if (rounded < kMidLimit) return kLargeSegment;
  return (rounded + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
}

CachingAllocator::Block* CachingAllocator::find_free(size_t rounded, StreamKey stream) {
  FreeList& pool = pool_for(rounded);
  Block probe;
  probe.stream = stream;
  probe.size = rounded;
  probe.ptr = nullptr;
  auto it = pool.lower_bound(&probe);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;  // best fit within the stream
  Block* block = *it;
  pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t rounded, StreamKey stream) {
  const size_t size = segment_size_for(rounded);
  void* ptr = source_->allocate_segment(size);
  if (ptr == nullptr) {
    ++stats_.alloc_retries;
    release_free_segments();
    ptr = source_->allocate_segment(size);
  }
  if (ptr == nullptr) {
    fail(
        "out of device memory: a {}-byte request needed a new {}-byte segment; live {} bytes, reserved {} bytes "
        "(peak live {} bytes)",
        rounded, size, stats_.live_bytes, stats_.reserved_bytes, stats_.peak_bytes);
  }
  stats_.reserved_bytes += static_cast<int64_t>(size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  auto* block = new Block;
  block->ptr = static_cast<char*>(ptr);
  block->size = size;
  block->stream = stream;
  block->small = rounded <= kSmallLimit;
  return block;
}

// Cuts `rounded` bytes off the front of a free block; the rest stays free.
CachingAllocator::Block* CachingAllocator::split(Block* block, size_t rounded) {
  const size_t remainder = block->size - rounded;
  const size_t min_remainder = block->small ? kMinBlock : kSmallLimit;
  if (remainder < min_remainder) return block;
  auto* rest = new Block;
  rest->ptr = block->ptr + rounded;
  rest->size = remainder;
  rest->stream = block->stream;
  rest->small = block->small;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = rounded;
  (rest->small ? small_free_ : large_free_).insert(rest);
  return block;
}

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t rounded = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  const StreamKey stream = private_pool_ ? *private_pool_ : current_stream_();
  Block* block = find_free(rounded, stream);
  if (block == nullptr) block = new_segment(rounded, stream);
  block = split(block, rounded);
  block->free = false;
  live_blocks_.emplace(block->ptr, block);
  ++stats_.allocations;
  note_live_change(static_cast<int64_t>(block->size));
  return block->ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t /*nbytes*/) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_blocks_.find(ptr);
  TITAN_CHECK(it != live_blocks_.end(), "caching allocator: freeing {} which it did not allocate", ptr);
  Block* block = it->second;
  live_blocks_.erase(it);
  note_live_change(-static_cast<int64_t>(block->size));
  block->free = true;
  FreeList& pool = block->small ? small_free_ : large_free_;
  // Merge with free neighbours so large requests find room again.
  if (block->prev != nullptr && block->prev->free) {
    Block* prev = block->prev;
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (block->next != nullptr && block->next->free) {
    Block* next = block->next;
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void CachingAllocator::release_free_segments() {
  for (FreeList* pool : {&small_free_, &large_free_}) {
    std::vector<Block*> whole;
    for (Block* block : *pool)
      if (block->whole_segment()) whole.push_back(block);
    for (Block* block : whole) {
      pool->erase(block);
      source_->free_segment(block->ptr, block->size);
      stats_.reserved_bytes -= static_cast<int64_t>(block->size);
      delete block;
    }
  }
}

void CachingAllocator::begin_private_pool(StreamKey pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  TITAN_CHECK(!private_pool_, "caching allocator: a private pool is already active");
  private_pool_ = pool;
}

void CachingAllocator::end_private_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  private_pool_.reset();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_free_segments();
}

void CachingAllocator::note_live_change(int64_t delta) {
  stats_.live_bytes += delta;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats stats = stats_;
  stats.capacity_bytes = source_->capacity_bytes();
  return stats;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.live_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace titan
