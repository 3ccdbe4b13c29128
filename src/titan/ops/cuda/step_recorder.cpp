// Whole-step CUDA graphs: the current stream is captured in relaxed mode (the
// allocator may still cudaMalloc fresh segments for the graph's private pool
// while recording) and the graph is instantiated once, then launched per step.
#include "titan/core/step_recorder.h"
#include "titan/ops/cuda/allocator.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

class CudaStepRecorder final : public StepRecorder {
 public:
  ~CudaStepRecorder() override {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  void begin() override {
    TITAN_CHECK(!recording_ && exec_ == nullptr, "graph capture: this recorder already holds a step");
    stream_ = current_stream();
    // The warm-up steps' cached blocks go back to the device so the graph's
    // private pool can take that memory instead of adding to it.
    TITAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    caching_allocator().empty_cache();
    // An odd key: never a real stream's address, so no eager work shares the pool.
    caching_allocator().begin_private_pool(reinterpret_cast<CachingAllocator::StreamKey>(this) | 1);
    const cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
    if (status != cudaSuccess) caching_allocator().end_private_pool();
    TITAN_CUDA_CHECK(status);
    recording_ = true;
  }
  void end() override {
    cudaGraph_t graph = finish_capture();
    const cudaError_t status = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    TITAN_CUDA_CHECK(status);
  }
  void cancel() override {
    if (!recording_) return;
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's own failure, already reported by whoever raised it
    caching_allocator().end_private_pool();
    recording_ = false;
  }
  void replay() override {
    TITAN_CHECK(exec_ != nullptr, "graph capture: replay before a step was recorded");
    TITAN_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream()));
  }

 private:
  cudaGraph_t finish_capture() {
    TITAN_CHECK(recording_, "graph capture: end() without begin()");
    cudaGraph_t graph = nullptr;
    const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
    caching_allocator().end_private_pool();
    recording_ = false;
    TITAN_CUDA_CHECK(status);
    return graph;
  }

  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  bool recording_ = false;
};

}  // namespace

void register_step_recorder() {
  titan::register_step_recorder(DeviceType::cuda, [] { return std::make_unique<CudaStepRecorder>(); });
}

}  // namespace titan::ops::cuda
