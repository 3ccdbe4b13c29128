// Storage: one block of bytes on one device, shared by every tensor view of it.
// It either owns its bytes (taken from the device's allocator) or wraps memory
// someone else owns (a memory-mapped shard, a pinned host buffer) with a deleter.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "titan/core/device.h"

namespace titan {

class Storage {
 public:
  // Allocates nbytes on `device` (nothing for meta).
  Storage(size_t nbytes, Device device);
  // Owns nbytes on `device` that reallocate() will allocate: a buffer used
  // only at times (FSDP's gathered parameters) costs nothing until then.
  struct Deferred {};
  Storage(size_t nbytes, Device device, Deferred) : nbytes_(nbytes), device_(device), owned_(true) {}
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
  bool owns_memory() const { return owned_; }
  // Activation offload never moves storage marked so: buffers a collective
  // may still be writing, or that outlive the step.
  void keep_on_device() { keep_on_device_ = true; }
  bool kept_on_device() const { return keep_on_device_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = false;
  bool keep_on_device_ = false;
  std::function<void(void*)> release_;
};

// Collects the storages allocated on this thread while it is alive (the
// innermost watch wins): activation offload uses it to find what a block's
// forward left alive for its backward.
class StorageWatch {
 public:
  StorageWatch();
  ~StorageWatch();
  StorageWatch(const StorageWatch&) = delete;
  StorageWatch& operator=(const StorageWatch&) = delete;
  // The storages seen so far that are still alive.
  std::vector<std::shared_ptr<Storage>> alive() const;
  // Called by Tensor::empty for every storage it allocates.
  static void notify(const std::shared_ptr<Storage>& storage);

 private:
  StorageWatch* previous_;
  std::vector<std::weak_ptr<Storage>> seen_;
};

}  // namespace titan
