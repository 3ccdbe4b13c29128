// The CUDA device allocator (a CachingAllocator over cudaMalloc), for the
// parts of the CUDA backend that steer it (graph capture's private pool).
#pragma once

#include "titan/core/caching_allocator.h"

namespace titan::ops::cuda {

CachingAllocator& caching_allocator();

}  // namespace titan::ops::cuda
