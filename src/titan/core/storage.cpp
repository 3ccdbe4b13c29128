#include "titan/core/storage.h"

#include "titan/core/allocator.h"
#include "titan/core/error.h"

namespace titan {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  if (!device.is_meta()) data_ = allocator_for(device.type).allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

void Storage::release_memory() {
  TITAN_CHECK(owned_, "release_memory on storage that wraps external memory");
  if (data_ != nullptr && !device_.is_meta()) allocator_for(device_.type).deallocate(data_, nbytes_);
  data_ = nullptr;
}

void Storage::reallocate() {
  TITAN_CHECK(owned_, "reallocate on storage that wraps external memory");
  if (data_ == nullptr && !device_.is_meta()) data_ = allocator_for(device_.type).allocate(nbytes_);
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
    if (!device_.is_meta()) allocator_for(device_.type).deallocate(data_, nbytes_);
  } else if (release_) {
    release_(data_);
  }
}

}  // namespace titan
