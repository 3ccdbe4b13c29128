#include "titan/train/captured_step.h"

#include "titan/core/copy.h"

namespace titan::train {
namespace {

// A copy of a step input the recorded graph reads from (undefined stays undefined).
Tensor static_copy(const Tensor& t) { return t.defined() ? t.clone() : t; }

void refill(const Tensor& target, const Tensor& source) {
  if (!target.defined()) return;
  TITAN_CHECK(source.defined() && source.shape() == target.shape(),
              "graph capture: a step input changed shape from {} to {}; the recorded step needs the same shapes",
              shape_str(target.shape()), source.defined() ? shape_str(source.shape()) : "(none)");
  titan::copy_(target, source);
}

}  // namespace

StepOutputs CapturedStep::run(const StepInputs& step) {
  if (!recorder_) {
    inputs_ = {};
    for (const models::DecoderInputs& in : step.inputs) {
      inputs_.inputs.push_back({static_copy(in.input_ids), static_copy(in.positions), static_copy(in.document_ids)});
    }
    for (const Tensor& labels : step.labels) inputs_.labels.push_back(static_copy(labels));
    for (const Tensor& scale : step.loss_scale_tensors) inputs_.loss_scale_tensors.push_back(scale.clone());
    std::unique_ptr<StepRecorder> recorder = make_step_recorder(device_.type);
    recorder->begin();
    try {
      outputs_ = runner_.run(inputs_, /*apply_update=*/true);
      recorder->end();
    } catch (...) {
      recorder->cancel();
      throw;
    }
    recorder_ = std::move(recorder);
  } else {
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      const models::DecoderInputs &target = inputs_.inputs[i], &source = step.inputs[i];
      refill(target.input_ids, source.input_ids);
      refill(target.positions, source.positions);
      refill(target.document_ids, source.document_ids);
      refill(inputs_.labels[i], step.labels[i]);
    }
    for (size_t i = 0; i < step.loss_scale_tensors.size(); ++i) {
      refill(inputs_.loss_scale_tensors[i], step.loss_scale_tensors[i]);
    }
  }
  recorder_->replay();
  return outputs_;
}

}  // namespace titan::train
