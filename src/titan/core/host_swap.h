// Copies between a device's memory and host buffers that can run beside the
// compute (activation offload). Each backend that has a separate device
// memory registers one; the CPU's copies its "device" memory with memcpy, so
// the offload bookkeeping runs (and is tested) on the CPU too.
#pragma once

#include <cstddef>
#include <memory>

#include "titan/core/device.h"

namespace titan {

class HostSwapEngine {
 public:
  virtual ~HostSwapEngine() = default;
  // Host memory the copies can use at full speed (pinned on CUDA).
  virtual void* allocate_host(size_t nbytes) = 0;
  virtual void free_host(void* ptr) = 0;
  // Orders the copies queued next after every compute kernel queued so far.
  virtual void after_compute() = 0;
  virtual void copy_to_host(void* host, const void* device, size_t nbytes) = 0;
  virtual void copy_to_device(void* device, const void* host, size_t nbytes) = 0;
  // A point after every copy queued so far (null where copies are synchronous).
  virtual std::shared_ptr<void> mark() = 0;
  // The host waits for `marker`: device memory copied out may then be freed.
  virtual void host_wait(const std::shared_ptr<void>& marker) = 0;
  // Compute queued from now on waits for `marker`: memory copied back is ready.
  virtual void compute_wait(const std::shared_ptr<void>& marker) = 0;
};

HostSwapEngine& host_swap_engine(DeviceType type);
void register_host_swap_engine(DeviceType type, HostSwapEngine* engine);

}  // namespace titan
