// training.graph_capture: a step's device half recorded once and replayed
// every later step, with no host work per kernel. The recording runs on
// copies of the first step's inputs; each later step refills those copies
// and replays. Gradients, losses and the norm are the recording's tensors,
// and the optimizer's update is inside the recording.
#pragma once

#include <memory>

#include "titan/core/step_recorder.h"
#include "titan/train/step_runner.h"

namespace titan::train {

class CapturedStep {
 public:
  CapturedStep(StepRunner& runner, Device device) : runner_(runner), device_(device) {}

  // The first call records (recording runs nothing) and every call replays.
  StepOutputs run(const StepInputs& step);
  bool recorded() const { return recorder_ != nullptr; }

 private:
  StepRunner& runner_;
  Device device_;
  std::unique_ptr<StepRecorder> recorder_;
  StepInputs inputs_;
  StepOutputs outputs_;
};

}  // namespace titan::train
