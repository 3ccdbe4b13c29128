// The stream every CUDA kernel launches on. Each host thread has a current
// stream (by default one non-blocking stream per device, shared by the
// threads); graph capture and activation offload swap it for their own.
// Plain CUDA types only, so .cu files include it too.
#pragma once

#include <cuda_runtime.h>

namespace titan::ops::cuda {

cudaStream_t current_stream();
// Makes `stream` the calling thread's current stream (nullptr restores the default).
void set_current_stream(cudaStream_t stream);
// A new stream that never waits for the legacy default stream (the process
// keeps it: streams here live as long as the process).
cudaStream_t create_nonblocking_stream();
// Multiprocessors on the current device (grids size themselves by it).
int multiprocessor_count();
// The current device's compute capability as 10 * major + minor (90 for
// sm_90), cached per device; 0 when it cannot be read. Kernels that need
// tensor cores of a generation ask it before launching.
int compute_capability();

// Sets the current stream for one scope.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream) : previous_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace titan::ops::cuda
