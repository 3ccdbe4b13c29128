// Registers the CUDA backend when a GPU is visible; on a machine without one
// (or without a driver) it registers nothing, and CUDA tensors are an error.
#include <cuda_runtime.h>

#include "titan/core/allocator.h"

namespace titan::ops::cuda {

Allocator* cuda_allocator();
void register_copy();

void register_kernels() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" status
    return;
  }
  register_allocator(DeviceType::cuda, cuda_allocator());
  register_copy();
}

}  // namespace titan::ops::cuda
