// Turns a failed CUDA runtime call into a titan::Error naming the call.
#pragma once

#include <cuda_runtime.h>

#include "titan/core/error.h"

#define TITAN_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                         \
    const cudaError_t titan_cuda_status = (call);                                                              \
    if (titan_cuda_status != cudaSuccess) {                                                                    \
      ::titan::fail("CUDA call {} failed: {} ({}:{})", #call, cudaGetErrorString(titan_cuda_status), __FILE__, \
                    __LINE__);                                                                                 \
    }                                                                                                          \
  } while (0)
