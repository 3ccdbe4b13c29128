// The profiler's device timer for CUDA: a pair of events around each op's
// launches on the current stream; at the step's end their elapsed times from
// an origin event become "kernel" spans on a "cuda stream" track. The origin
// is recorded on an idle stream when profiling starts, so host and device
// axes line up to within the launch latency of that first event.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "titan/core/profiler.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

class CudaTimer final : public profiler::DeviceTimer {
 public:
  int64_t begin(const char* name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (origin_ == nullptr) {
      origin_ = take_event();
      origin_host_us_ = profiler::now_us();
      TITAN_CUDA_CHECK(cudaEventRecord(origin_, current_stream()));
    }
    Mark mark{name, take_event(), take_event()};
    TITAN_CUDA_CHECK(cudaEventRecord(mark.start, current_stream()));
    marks_.push_back(mark);
    return static_cast<int64_t>(marks_.size()) - 1;
  }

  void end(int64_t handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handle < 0 || handle >= static_cast<int64_t>(marks_.size())) return;
    TITAN_CUDA_CHECK(cudaEventRecord(marks_[static_cast<size_t>(handle)].end, current_stream()));
  }

  std::vector<profiler::Event> collect() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<profiler::Event> events;
    if (origin_ == nullptr) return events;
    profiler::set_track_name(profiler::kDeviceTracks, "cuda stream");
    for (const Mark& mark : marks_) {
      TITAN_CUDA_CHECK(cudaEventSynchronize(mark.end));
      float start_ms = 0.0f, end_ms = 0.0f;
      TITAN_CUDA_CHECK(cudaEventElapsedTime(&start_ms, origin_, mark.start));
      TITAN_CUDA_CHECK(cudaEventElapsedTime(&end_ms, origin_, mark.end));
      profiler::Event event;
      event.name = mark.name;
      event.category = "kernel";
      event.start_us = origin_host_us_ + 1000.0 * start_ms;
      event.duration_us = 1000.0 * (end_ms - start_ms);
      event.thread = profiler::kDeviceTracks;
      events.push_back(std::move(event));
      free_.push_back(mark.start);
      free_.push_back(mark.end);
    }
    marks_.clear();
    free_.push_back(origin_);
    origin_ = nullptr;
    return events;
  }

 private:
  struct Mark {
    const char* name;
    cudaEvent_t start, end;
  };

  cudaEvent_t take_event() {
    if (!free_.empty()) {
      cudaEvent_t event = free_.back();
      free_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    TITAN_CUDA_CHECK(cudaEventCreate(&event));
    return event;
  }

  std::mutex mutex_;
  std::vector<Mark> marks_;
  std::vector<cudaEvent_t> free_;  // events kept for the next profiled step
  cudaEvent_t origin_ = nullptr;
  double origin_host_us_ = 0.0;
};

}  // namespace

void register_profiler_timer() {
  static CudaTimer timer;
  profiler::register_device_timer(DeviceType::cuda, &timer);
}

}  // namespace titan::ops::cuda
