// The trainer's side of pipeline parallelism: choosing the stages and the
// schedule from the job config (TorchTitan's keys), keeping this rank's
// parts of the model, running a step's micro-batches through the schedule,
// and bringing every stage's weights together for the model export.
#include "titan/core/copy.h"
#include "titan/train/pipeline_plan.h"
#include "titan/train/trainer.h"

namespace titan::train {
namespace {

namespace pipeline = parallel::pipeline;

// The top-level module a state name belongs to: "layers.3.attention.wq.weight" -> "layers.3".
std::string module_of(const std::string& name) {
  const size_t first = name.find('.');
  if (name.starts_with("layers.")) return name.substr(0, name.find('.', first + 1));
  return name.substr(0, first);
}

}  // namespace

void Trainer::setup_pipeline(const models::ModelSpec& spec) {
  models::PipelinePlacement placement = plan_pipeline(config_, spec, model_->config, mesh_->coordinate("pp"));
  pipeline_microbatches_ = pipeline_microbatches(config_);
  pipeline_parts_ = placement.parts;
  model_->retain_modules(placement.held_modules());
  pipeline_ =
      std::make_unique<PipelineRunner>(*model_, pipeline_parts_, std::move(placement.schedule), mesh_->group("pp"));
}

void Trainer::run_pipeline_step(const StepInputs& step, StepOutputs& out) {
  const int64_t size = config_.parallelism.pipeline_parallel_microbatch_size;
  const auto slice = [&](const Tensor& t, int64_t m) { return t.defined() ? t.narrow(0, m * size, size) : t; };
  pipeline_pass_seconds_ = pipeline_compute_seconds_ = 0.0;
  for (int64_t micro = 0; micro < accumulation_; ++micro) {
    const models::DecoderInputs& batch = step.inputs[static_cast<size_t>(micro)];
    std::vector<models::DecoderInputs> inputs;
    std::vector<Tensor> labels;
    for (int64_t m = 0; m < pipeline_microbatches_; ++m) {
      inputs.push_back({slice(batch.input_ids, m), slice(batch.positions, m), slice(batch.document_ids, m)});
      labels.push_back(slice(step.labels[static_cast<size_t>(micro)], m));
    }
    // Each pipeline micro-batch's loss weighted by its counted labels (Trainer::token_loss_scales).
    const auto first = step.loss_scales.begin() + micro * pipeline_microbatches_;
    const std::vector<Tensor> losses =
        pipeline_->train(inputs, labels, std::vector<float>(first, first + pipeline_microbatches_));
    pipeline_pass_seconds_ += pipeline_->pass_seconds();
    pipeline_compute_seconds_ += pipeline_->compute_seconds();
    out.losses.insert(out.losses.end(), losses.begin(), losses.end());
    if (fsdp_) {
      // One reduction per pass, of the micro-batches' summed gradients.
      fsdp_->set_sync_replicas(micro + 1 == accumulation_);
      fsdp_->finish_backward();
    }
  }
}

double Trainer::sum_over_pp(double value) const {
  const auto& pp = mesh_->group("pp");
  if (pp->size() == 1) return value;
  Tensor total = Tensor::full({1}, value, DType::f32);
  pp->all_reduce(total, comm::ReduceOp::sum)->wait();
  return total.item();
}

void Trainer::pipeline_metrics(StepMetrics& m) const {
  const double bubble = pipeline_pass_seconds_ > 0 ? 1.0 - pipeline_compute_seconds_ / pipeline_pass_seconds_ : 0.0;
  const auto each = comm::gather_per_rank(*mesh_->group("pp"), {bubble, m.peak_memory_gib});
  m.pipeline_rank_bubble = each[0];
  m.pipeline_rank_peak_memory_gib = each[1];
  double sum = 0.0;
  for (double rank_bubble : m.pipeline_rank_bubble) sum += rank_bubble;
  m.pipeline_bubble = sum / static_cast<double>(m.pipeline_rank_bubble.size());
}

std::shared_ptr<models::Decoder> Trainer::gather_pipeline_model(
    const std::vector<std::pair<nn::Parameter*, Tensor>>& full) {
  const auto& pp = mesh_->group("pp");
  std::map<nn::Parameter*, Tensor> full_of(full.begin(), full.end());
  std::map<std::string, Tensor> mine;
  for (auto& [name, parameter] : model_->named_parameters()) {
    mine[name] = full_of.count(parameter) ? full_of.at(parameter) : parameter->data;
  }
  for (auto& [name, buffer] : model_->named_persistent_buffers()) mine[name] = *buffer;
  // Every tensor of the whole model, in its order (a meta build allocates nothing): the message tags.
  const std::vector<std::pair<std::string, Tensor>> order = model_->config.build(Device::meta())->named_state();
  if (pp->rank() != 0) {
    std::vector<std::shared_ptr<comm::Work>> sends;
    for (size_t tag = 0; tag < order.size(); ++tag) {
      auto found = mine.find(order[tag].first);
      if (found != mine.end()) sends.push_back(pp->send(found->second.contiguous(), 0, static_cast<int>(tag)));
    }
    for (const auto& send : sends) send->wait();
    return nullptr;
  }
  std::map<std::string, int> owner;
  const pipeline::Schedule& schedule = pipeline_->schedule();
  for (size_t stage = 0; stage < pipeline_parts_.size(); ++stage) {
    for (const std::string& module : pipeline_parts_[stage]) owner[module] = schedule.stage_rank[stage];
  }
  auto whole = model_->config.build(device_);
  const std::vector<std::pair<std::string, Tensor>> state = whole->named_state();
  for (size_t tag = 0; tag < state.size(); ++tag) {
    const auto& [name, tensor] = state[tag];
    auto found = mine.find(name);
    if (found != mine.end()) {
      titan::copy_(tensor, found->second);
    } else {
      pp->recv(tensor, owner.at(module_of(name)), static_cast<int>(tag))->wait();
    }
  }
  return whole;
}

}  // namespace titan::train
