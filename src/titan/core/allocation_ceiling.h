// A ceiling on single allocations, for tests that prove a code path never
// holds a whole tensor it should only hold a part of (a rank building its
// shards of a model must never allocate a whole parameter). While a ceiling is
// alive, an allocation on its device type larger than its bytes throws
// titan::Error naming both sizes. Process-wide; one at a time.
#pragma once

#include <cstddef>

#include "titan/core/device.h"

namespace titan {

class AllocationCeiling {
 public:
  AllocationCeiling(DeviceType device, size_t max_bytes);
  ~AllocationCeiling();
  AllocationCeiling(const AllocationCeiling&) = delete;
  AllocationCeiling& operator=(const AllocationCeiling&) = delete;

  // Throws when a ceiling for `device` is alive and `nbytes` exceeds it (every owned allocation calls it).
  static void check(DeviceType device, size_t nbytes);

 private:
  DeviceType device_;
};

}  // namespace titan
