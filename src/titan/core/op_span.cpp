#include "titan/core/op_span.h"

#include <algorithm>

namespace titan {

OpSpan::OpSpan(const char* op, Device device) : span_("op", op), noted_flops_(profiler::take_noted_flops()) {
  if (!span_.recording()) return;
  span_.args()["device"] = device.str();
  device_timer_ = profiler::device_timer(device.type);
  if (device_timer_ != nullptr) device_mark_ = device_timer_->begin(op);
}

void OpSpan::describe(const Tensor& tensor) {
  if (!tensor.defined()) return;
  shapes_.push_back(tensor.shape());
  if (dtype_.empty()) dtype_ = dtype_name(tensor.dtype());
  bytes_ += static_cast<int64_t>(tensor.nbytes());
  largest_ = std::max(largest_, tensor.numel());
}

OpSpan::~OpSpan() {
  if (!span_.recording()) return;
  if (device_timer_ != nullptr) device_timer_->end(device_mark_);
  nlohmann::json& args = span_.args();
  args["shapes"] = std::move(shapes_);
  args["dtype"] = dtype_;
  args["bytes"] = bytes_;
  args["flops"] = noted_flops_ >= 0 ? noted_flops_ : static_cast<double>(largest_);
  if (noted_flops_ < 0) args["flops_estimated"] = true;
}

}  // namespace titan
