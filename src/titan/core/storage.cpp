#include "titan/core/storage.h"

#include "titan/core/allocator.h"

namespace titan {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device), owned_(true) {
  if (!device.is_meta()) data_ = allocator_for(device.type).allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (owned_) {
    if (!device_.is_meta()) allocator_for(device_.type).deallocate(data_, nbytes_);
  } else if (release_) {
    release_(data_);
  }
}

}  // namespace titan
