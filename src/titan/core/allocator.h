// Device allocators and their statistics. Every tensor byte comes from the
// allocator registered for its device type, so live and peak memory reported
// by the trainer are exact, not sampled.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "titan/core/device.h"

namespace titan {

struct MemoryStats {
  int64_t live_bytes = 0;           // held by tensors now
  int64_t peak_bytes = 0;           // most live bytes since the last reset_peak()
  int64_t reserved_bytes = 0;       // obtained from the system (>= live for caching allocators)
  int64_t peak_reserved_bytes = 0;  // most reserved bytes since the last reset_peak()
  int64_t allocations = 0;          // calls to allocate() since start
  int64_t alloc_retries = 0;        // allocations that had to free cached blocks and retry
  int64_t capacity_bytes = 0;       // the device's memory (0: not known to the allocator)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for nbytes (nullptr for nbytes == 0); throws titan::Error when out of memory.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// Host memory, 64-byte aligned so every row a kernel touches starts on a cache
// line and AVX-512 loads of aligned tensors never split.
//
// Blocks of kCachedBlock (256 KiB) and up are mapped from the system directly
// (2 MiB transparent huge pages from kLargeBlock, 4 MiB, up) and, when freed,
// kept for the next request of the same size: a training step frees and
// allocates the same sizes every step, and a fresh block costs the kernel a
// page fault and a page clear for every page (a MoE layer's 2.4 GB of expert
// gradients at the Qwen3-30B-A3B shape spent most of their time there). A
// request the cache cannot serve first returns as many cached bytes to the
// system, so live + cached never exceeds the peak of live bytes: resident
// memory follows what the tensors use (what the memory estimates count).
// Mapping them directly, not through malloc, is what makes returning them
// real: glibc keeps freed heap memory, and raises its own mapping threshold
// as blocks are freed, which at llama3 1B left 0.75 GiB resident beyond the
// tensors' peak. Smaller blocks come from malloc.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCachedBlock = size_t{256} << 10;
  static constexpr size_t kLargeBlock = size_t{4} << 20;
  static constexpr size_t kMaxCachedBytes = size_t{8} << 30;
  CpuAllocator() = default;
  ~CpuAllocator() override { release_cached(); }
  CpuAllocator(const CpuAllocator&) = delete;
  CpuAllocator& operator=(const CpuAllocator&) = delete;
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  // Returns every cached block to the system.
  void release_cached();

 private:
  struct LargeBlockCache {
    std::mutex mutex;
    std::multimap<size_t, void*> blocks;  // rounded size -> free large block
    int64_t bytes = 0;
    int64_t peak_reserved = 0;
  };
  void* take_cached(size_t rounded);
  void make_room(size_t rounded);
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> retries_{0};
  std::unique_ptr<LargeBlockCache> cache_ = std::make_unique<LargeBlockCache>();
};

// The allocator for a device type; meta tensors have none (they own no bytes).
Allocator& allocator_for(DeviceType type);
// Backends install theirs at start-up (the CUDA backend registers its caching allocator).
void register_allocator(DeviceType type, Allocator* allocator);
MemoryStats memory_stats(DeviceType type);

}  // namespace titan
