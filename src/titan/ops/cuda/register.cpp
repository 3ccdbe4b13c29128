// Registers the CUDA backend when a GPU is visible; on a machine without one
// (or without a driver) it registers nothing, and CUDA tensors are an error.
#include <cuda_runtime.h>

#include "titan/core/allocator.h"
#include "titan/ops/cuda/kernel_files.h"

namespace titan::ops::cuda {

Allocator* cuda_allocator();
#define TITAN_DECLARE_REGISTER(name) void register_##name();
TITAN_CUDA_KERNEL_FILES(TITAN_DECLARE_REGISTER)
#undef TITAN_DECLARE_REGISTER

void register_kernels() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" status
    return;
  }
  register_allocator(DeviceType::cuda, cuda_allocator());
#define TITAN_CALL_REGISTER(name) register_##name();
  TITAN_CUDA_KERNEL_FILES(TITAN_CALL_REGISTER)
#undef TITAN_CALL_REGISTER
}

}  // namespace titan::ops::cuda
