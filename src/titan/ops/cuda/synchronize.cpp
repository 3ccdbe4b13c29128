// Device synchronisation for timings: waits for the calling thread's current
// stream, where every kernel and copy of ours is queued.
#include "titan/core/copy.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

void synchronize_kernel() { TITAN_CUDA_CHECK(cudaStreamSynchronize(current_stream())); }

}  // namespace

void register_synchronize() { synchronize_kernels.set_kernel(DeviceType::cuda, synchronize_kernel); }

}  // namespace titan::ops::cuda
