#include "titan/core/storage.h"

#include "titan/core/allocation_ceiling.h"
#include "titan/core/allocator.h"
#include "titan/core/error.h"
#include "titan/core/memory_recorder.h"

namespace titan {

namespace {

// Every owned byte comes and goes through these two, so the memory recorder
// sees each allocation and free, and a failed allocation can leave a snapshot.
void* allocate_bytes(size_t nbytes, Device device) {
  AllocationCeiling::check(device.type, nbytes);
  Allocator& allocator = allocator_for(device.type);
  void* ptr = nullptr;
  try {
    ptr = allocator.allocate(nbytes);
  } catch (const std::exception& e) {
    memory::on_allocation_failure(device, nbytes, e.what());
    throw;
  }
  if (ptr != nullptr && memory::recording()) memory::record_alloc(device, ptr, nbytes);
  return ptr;
}

// The free is recorded before the bytes go back, so another thread handed the
// same address next cannot have its allocation recorded first.
void free_bytes(void* ptr, size_t nbytes, Device device) {
  if (ptr != nullptr && memory::recording()) memory::record_free(device, ptr, nbytes);
  allocator_for(device.type).deallocate(ptr, nbytes);
}

}  // namespace

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  if (!device.is_meta()) data_ = allocate_bytes(nbytes, device);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

void Storage::release_memory() {
  TITAN_CHECK(owned_, "release_memory on storage that wraps external memory");
  if (data_ != nullptr && !device_.is_meta()) free_bytes(data_, nbytes_, device_);
  data_ = nullptr;
}

void Storage::reallocate() {
  TITAN_CHECK(owned_, "reallocate on storage that wraps external memory");
  if (data_ == nullptr && !device_.is_meta()) data_ = allocate_bytes(nbytes_, device_);
}

namespace {
thread_local StorageWatch* active_watch = nullptr;
}  // namespace

StorageWatch::StorageWatch() : previous_(active_watch) { active_watch = this; }

StorageWatch::~StorageWatch() { active_watch = previous_; }

std::vector<std::shared_ptr<Storage>> StorageWatch::alive() const {
  std::vector<std::shared_ptr<Storage>> out;
  for (const std::weak_ptr<Storage>& weak : seen_) {
    if (std::shared_ptr<Storage> storage = weak.lock()) out.push_back(std::move(storage));
  }
  return out;
}

void StorageWatch::notify(const std::shared_ptr<Storage>& storage) {
  if (active_watch != nullptr) active_watch->seen_.push_back(storage);
}

Storage::~Storage() {
  if (owned_) {
    if (!device_.is_meta()) free_bytes(data_, nbytes_, device_);
  } else if (release_) {
    release_(data_);
  }
}

}  // namespace titan
