// The device half of a training step: gradients zeroed, forward and backward
// over the step's micro-batches (one after another, or through the pipeline
// schedule), the gradients synchronised and clipped by the parallelism layer
// (parallel/parallelized_model.h), and optionally the optimizer's update.
// Device work only (it runs under NoHostReadsScope), so a step can be
// recorded and replayed (train/captured_step.h).
#pragma once

#include <functional>
#include <vector>

#include "titan/models/decoder.h"
#include "titan/optim/adamw.h"
#include "titan/parallel/parallelized_model.h"
#include "titan/train/pipeline_runner.h"
#include "titan/train/step_inputs.h"

namespace titan::train {

// What the device half of a step leaves for the host to read after it.
struct StepOutputs {
  std::vector<Tensor> losses;      // each micro-batch's loss (0-d f32); under pipeline parallelism the last stage's
  std::vector<Tensor> aux_losses;  // each micro-batch's MoE auxiliary loss (none without one)
  Tensor clip;                     // [gradient norm, clipping factor] f32
};

class StepRunner {
 public:
  // `pipeline`: this rank's stages and schedule (null without pipeline
  // parallelism); each micro-batch is cut into `pipeline` micro-batches of `size` rows.
  struct Pipelining {
    PipelineRunner* runner = nullptr;
    int64_t micro_batches = 1, micro_batch_size = 0;
  };
  StepRunner(models::Decoder& model, parallel::ParallelizedModel& parallelized, Pipelining pipeline,
             optim::AdamW& optimizer, double max_norm, Device device);

  // `apply_update` false leaves the optimizer's update to the caller (eager
  // steps apply it once the loss and norm are known to be finite).
  StepOutputs run(const StepInputs& step, bool apply_update);
  // Runs once the step's gradients are final in this job and before they are
  // clipped: fault tolerance averages them across replica groups there.
  std::function<void()> before_clip;

  // This step's pipeline passes: their seconds, and those spent in compute
  // (the rest waited for other stages). Zero without pipeline parallelism.
  double pipeline_pass_seconds() const { return pipeline_pass_seconds_; }
  double pipeline_compute_seconds() const { return pipeline_compute_seconds_; }

 private:
  void run_micro_batches(const StepInputs& step, StepOutputs& out);
  void run_pipeline(const StepInputs& step, StepOutputs& out);

  models::Decoder& model_;
  parallel::ParallelizedModel& parallelized_;
  Pipelining pipeline_;
  optim::AdamW& optimizer_;
  double max_norm_;
  Device device_;
  double pipeline_pass_seconds_ = 0.0, pipeline_compute_seconds_ = 0.0;
};

}  // namespace titan::train
