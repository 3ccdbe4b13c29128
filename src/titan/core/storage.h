// Storage: one block of bytes on one device, shared by every tensor view of it.
// It either owns its bytes (taken from the device's allocator) or wraps memory
// someone else owns (a memory-mapped shard, a pinned host buffer) with a deleter.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "titan/core/device.h"

namespace titan {

class Storage {
 public:
  // Allocates nbytes on `device` (nothing for meta).
  Storage(size_t nbytes, Device device);
  // Wraps external memory; `release` runs when the last view dies (may be empty).
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  // Frees the bytes but keeps the Storage (and every view of it): FSDP drops
  // gathered parameters between uses this way. Only for storage it owns.
  void release_memory();
  // Allocates the bytes again after release_memory() (contents undefined).
  void reallocate();
  bool has_memory() const { return data_ != nullptr || nbytes_ == 0; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = false;
  std::function<void(void*)> release_;
};

}  // namespace titan
