// The profiler's span of one op call: its name, the shapes and dtype of its
// tensor arguments, the bytes they hold and its FLOPs (the formula the op
// noted with profiler::note_flops, else one per element of its largest
// tensor, marked as estimated). On CUDA the span times the launch; the
// device timer times the kernels.
#pragma once

#include <string>
#include <vector>

#include "titan/core/device.h"
#include "titan/core/profiler.h"
#include "titan/core/tensor.h"

namespace titan {

class OpSpan {
 public:
  OpSpan(const char* op, Device device);
  ~OpSpan();
  OpSpan(const OpSpan&) = delete;
  OpSpan& operator=(const OpSpan&) = delete;

  void describe(const Tensor& tensor);
  void describe(const std::vector<Tensor>& tensors) {
    for (const Tensor& tensor : tensors) describe(tensor);
  }
  // Arguments that are not tensors say nothing.
  template <typename T>
  void describe(const T&) {}

 private:
  profiler::Span span_;
  profiler::DeviceTimer* device_timer_ = nullptr;  // asynchronous devices: the kernels' own timing
  int64_t device_mark_ = -1;
  double noted_flops_;
  nlohmann::json shapes_ = nlohmann::json::array();
  std::string dtype_;
  int64_t bytes_ = 0;
  int64_t largest_ = 0;
};

}  // namespace titan
