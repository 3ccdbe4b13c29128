#include "titan/train/step_runner.h"

#include "titan/autograd/engine.h"
#include "titan/core/profiler.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"

namespace titan::train {

StepRunner::StepRunner(models::Decoder& model, parallel::ParallelizedModel& parallelized, Pipelining pipeline,
                       optim::AdamW& optimizer, double max_norm, Device device)
    : model_(model),
      parallelized_(parallelized),
      pipeline_(pipeline),
      optimizer_(optimizer),
      max_norm_(max_norm),
      device_(device) {}

StepOutputs StepRunner::run(const StepInputs& step, bool apply_update) {
  NoHostReadsScope no_host_reads("the training step's device work");
  StepOutputs out;
  model_.zero_grad();
  if (pipeline_.runner != nullptr) {
    run_pipeline(step, out);
  } else {
    run_micro_batches(step, out);
  }
  if (before_clip) {
    const profiler::Span span("phase", "fault_tolerance");
    before_clip();
  }
  {
    const profiler::Span span("phase", "clip_gradients");
    out.clip = parallelized_.synchronize_and_clip_gradients(model_, max_norm_, device_);
  }
  if (apply_update) {
    const profiler::Span span("phase", "optimizer");
    optimizer_.apply();
    parallelized_.after_optimizer_step();
  }
  return out;
}

void StepRunner::run_micro_batches(const StepInputs& step, StepOutputs& out) {
  const size_t micro_batches = step.inputs.size();
  for (size_t micro = 0; micro < micro_batches; ++micro) {
    const profiler::Span span("phase", "forward_backward");
    models::LossParts parts;
    Tensor loss = model_.loss(step.inputs[micro], step.labels[micro], &parts);
    // With multi-token prediction, the loss TorchTitan logs: the main cross-entropy plus the weighted MTP term.
    out.losses.push_back(parts.mtp.defined() ? ops::add(parts.lm, parts.mtp) : parts.lm);
    if (parts.aux.defined()) out.aux_losses.push_back(parts.aux);
    // A device scalar, not a constant: a recorded step replays with each step's label counts.
    loss = F::mul(loss, step.loss_scale_tensors[micro]);
    autograd::backward({loss});
    parallelized_.finish_backward(micro + 1 == micro_batches);
  }
}

// One pass of the schedule per micro-batch of the step, over its pipeline micro-batches.
void StepRunner::run_pipeline(const StepInputs& step, StepOutputs& out) {
  const int64_t size = pipeline_.micro_batch_size, per_batch = pipeline_.micro_batches;
  const auto slice = [&](const Tensor& t, int64_t m) { return t.defined() ? t.narrow(0, m * size, size) : t; };
  const size_t micro_batches = step.inputs.size();
  pipeline_pass_seconds_ = pipeline_compute_seconds_ = 0.0;
  for (size_t micro = 0; micro < micro_batches; ++micro) {
    const models::DecoderInputs& batch = step.inputs[micro];
    std::vector<models::DecoderInputs> inputs;
    std::vector<Tensor> labels;
    for (int64_t m = 0; m < per_batch; ++m) {
      inputs.push_back({slice(batch.input_ids, m), slice(batch.positions, m), slice(batch.document_ids, m)});
      labels.push_back(slice(step.labels[micro], m));
    }
    // Each pipeline micro-batch's loss weighted by its counted labels (StepInputs::loss_scales).
    const auto first = step.loss_scales.begin() + static_cast<int64_t>(micro) * per_batch;
    PipelineRunner& runner = *pipeline_.runner;
    const std::vector<Tensor> losses = runner.train(inputs, labels, std::vector<float>(first, first + per_batch));
    pipeline_pass_seconds_ += runner.pass_seconds();
    pipeline_compute_seconds_ += runner.compute_seconds();
    out.losses.insert(out.losses.end(), losses.begin(), losses.end());
    // One reduction per pass, of the micro-batches' summed gradients.
    parallelized_.finish_backward(micro + 1 == micro_batches);
  }
}

}  // namespace titan::train
