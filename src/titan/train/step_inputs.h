// The host half of a training step: its micro-batches loaded, each cut to
// this rank's part (its slice of every sequence under context parallelism),
// copied to the device, with the counts of trained labels and the loss scales
// that make the step's loss the mean over every trained label of the global
// batch, however unevenly loss masks spread them over ranks and micro-batches.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/data/data_loader.h"
#include "titan/models/decoder.h"
#include "titan/parallel/context_parallel.h"
#include "titan/train/job_config.h"

namespace titan::train {

// Where micro-batches come from: the job's dataset by default; tests and
// embedding programs may inject their own.
using BatchSource = std::function<data::Batch()>;

struct StepInputs {
  std::vector<models::DecoderInputs> inputs;
  std::vector<Tensor> labels;
  // Per loss (a micro-batch's, or under pipeline parallelism each pipeline
  // micro-batch's within it): this rank's counted labels (not
  // data::kIgnoreIndex), and what the loss (a mean over them) is multiplied
  // by before backward: labels x data-(and context-)parallel ranks / the
  // global batch's labels. The gradients' average over those ranks then
  // makes the step's loss the mean over every trained label of the global
  // batch.
  std::vector<int64_t> label_counts;
  std::vector<float> loss_scales;
  // The same scales as 0-d f32 tensors on the device: a recorded step
  // (graph capture) reads them, so new counts need only a refill.
  std::vector<Tensor> loss_scale_tensors;
  int64_t global_labels = 0;  // trained labels of the whole global batch
  int64_t tokens = 0;         // tokens this rank loaded (before any context-parallel cut)
  double data_seconds = 0.0;  // waiting for the loader
};

class StepInputsBuilder {
 public:
  // Checks, before any work, that the sequence cuts into 2 x cp equal chunks.
  StepInputsBuilder(const JobConfig& config, const comm::DeviceMesh& mesh, Device device, int64_t micro_batches,
                    int64_t pipeline_micro_batches);

  // Step `step`'s micro-batches from `batches` (one small all-reduce over the
  // data- and context-parallel ranks for the global label count).
  StepInputs next(const BatchSource& batches, int64_t step) const;
  // This rank's part of a loaded batch, and the model's inputs on the device.
  data::Batch local_batch(const data::Batch& batch) const;
  models::DecoderInputs model_inputs(const data::Batch& batch) const;

 private:
  // Fills step.loss_scales (and their device tensors) and step.global_labels.
  void set_loss_scales(StepInputs& step, int64_t step_number) const;

  const comm::DeviceMesh& mesh_;
  Device device_;
  int64_t micro_batches_, pipeline_micro_batches_;
  bool document_masking_;
  std::optional<parallel::SequenceLayout> context_layout_;
};

}  // namespace titan::train
