#include "titan/core/allocation_ceiling.h"

#include <atomic>
#include <limits>

#include "titan/core/error.h"

namespace titan {
namespace {

constexpr size_t kNoCeiling = std::numeric_limits<size_t>::max();
std::atomic<size_t> ceilings[kNumDeviceTypes] = {kNoCeiling, kNoCeiling, kNoCeiling};

}  // namespace

AllocationCeiling::AllocationCeiling(DeviceType device, size_t max_bytes) : device_(device) {
  size_t none = kNoCeiling;
  TITAN_CHECK(ceilings[static_cast<size_t>(device)].compare_exchange_strong(none, max_bytes),
              "AllocationCeiling: one for {} is already alive", device_type_name(device));
}

AllocationCeiling::~AllocationCeiling() { ceilings[static_cast<size_t>(device_)].store(kNoCeiling); }

void AllocationCeiling::check(DeviceType device, size_t nbytes) {
  const size_t ceiling = ceilings[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  TITAN_CHECK(nbytes <= ceiling, "an allocation of {} bytes on {} exceeds the ceiling of {} bytes set by a test",
              nbytes, device_type_name(device), ceiling);
}

}  // namespace titan
