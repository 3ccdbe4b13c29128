#include "titan/train/step_inputs.h"

#include <chrono>

#include "titan/core/profiler.h"
#include "titan/train/context_batch.h"

namespace titan::train {
namespace {

using Clock = std::chrono::steady_clock;
using comm::MeshDim;

// Counted labels (not data::kIgnoreIndex) of a [rows, seq] labels tensor, per
// group of rows when it is cut into `parts` (pipeline micro-batches).
std::vector<int64_t> label_counts(const Tensor& labels, int64_t parts) {
  const std::vector<int64_t> values = labels.to(Device::cpu()).to_ints();
  const size_t per_part = values.size() / static_cast<size_t>(parts);
  std::vector<int64_t> counts(static_cast<size_t>(parts), 0);
  for (size_t i = 0; i < values.size(); ++i) counts[i / per_part] += values[i] != data::kIgnoreIndex ? 1 : 0;
  return counts;
}

}  // namespace

StepInputsBuilder::StepInputsBuilder(const JobConfig& config, const comm::DeviceMesh& mesh, Device device,
                                     int64_t micro_batches, int64_t pipeline_micro_batches)
    : mesh_(mesh),
      device_(device),
      micro_batches_(micro_batches),
      pipeline_micro_batches_(pipeline_micro_batches),
      document_masking_(config.model.document_masking) {
  if (mesh.size(MeshDim::cp) > 1) {
    const bool load_balance = parallel::parse_load_balancer(config.parallelism.context_parallel_load_balancer);
    context_layout_ = parallel::SequenceLayout{config.training.seq_len, mesh.size(MeshDim::cp), load_balance};
    context_layout_->check("training.seq_len");
  }
}

data::Batch StepInputsBuilder::local_batch(const data::Batch& batch) const {
  if (!context_layout_) return batch;
  return context_shard(batch, *context_layout_, mesh_.coordinate(MeshDim::cp), document_masking_);
}

models::DecoderInputs StepInputsBuilder::model_inputs(const data::Batch& batch) const {
  models::DecoderInputs inputs{batch.input_ids.to(device_), {}, {}};
  // A context-parallel slice carries its global positions.
  if (document_masking_ || context_layout_) inputs.positions = batch.positions.to(device_);
  if (document_masking_) inputs.document_ids = batch.document_ids.to(device_);
  return inputs;
}

StepInputs StepInputsBuilder::next(const BatchSource& batches, int64_t step_number) const {
  StepInputs step;
  for (int64_t micro = 0; micro < micro_batches_; ++micro) {
    const auto data_start = Clock::now();
    const data::Batch loaded = [&] {
      const profiler::Span span("phase", "data");
      return batches();
    }();
    step.data_seconds += std::chrono::duration<double>(Clock::now() - data_start).count();
    step.tokens += loaded.input_ids.numel();
    const data::Batch batch = local_batch(loaded);
    for (int64_t count : label_counts(batch.labels, pipeline_micro_batches_)) step.label_counts.push_back(count);
    step.inputs.push_back(model_inputs(batch));
    step.labels.push_back(batch.labels.to(device_));
  }
  set_loss_scales(step, step_number);
  return step;
}

void StepInputsBuilder::set_loss_scales(StepInputs& step, int64_t step_number) const {
  int64_t local = 0;
  for (int64_t count : step.label_counts) local += count;
  // Tensor- and pipeline-parallel ranks share their batch: counted over dp x cp only,
  // where context-parallel ranks hold disjoint slices of the same sequences.
  const auto& dp = mesh_.group(MeshDim::dp_cp);
  int64_t global = local;
  if (dp->size() > 1) {
    Tensor total = Tensor::from_vector(std::vector<int64_t>{local}, {1});
    dp->all_reduce(total, comm::ReduceOp::sum)->wait();
    global = total.to_ints()[0];
  }
  TITAN_CHECK(global > 0,
              "step {}: no label of the global batch is trained (every one is the ignore index {}): the step would "
              "learn nothing; check the data's loss masks (an SFT dataset whose samples are all prompt?)",
              step_number, data::kIgnoreIndex);
  // Scaled by dp ranks / global labels: the gradients' average over the dp ranks
  // (FSDP, replicas) then sums every rank's label-weighted losses over the global
  // count. With every loss counting as many labels this is 1 / losses per rank.
  std::vector<float> scales;
  for (int64_t count : step.label_counts) {
    scales.push_back(
        static_cast<float>(static_cast<double>(count) * static_cast<double>(dp->size()) / static_cast<double>(global)));
  }
  step.loss_scales = scales;
  const Tensor on_device = Tensor::from_floats(scales, {static_cast<int64_t>(scales.size())}).to(device_);
  step.loss_scale_tensors.clear();
  for (int64_t i = 0; i < on_device.numel(); ++i) step.loss_scale_tensors.push_back(on_device.select(0, i));
  step.global_labels = global;
}

}  // namespace titan::train
