#include "titan/train/pipeline_runner.h"

#include <chrono>

#include "titan/nn/functional.h"

namespace titan::train {
namespace {

using parallel::pipeline::Action;
using parallel::pipeline::ActionType;
using Clock = std::chrono::steady_clock;

// Message kinds, each with its own tag range.
// Validation sends whole local batches, not micro-batches: its activations
// have their own shapes, agreed separately.
enum Kind { kActivation = 0, kGradient = 1, kShape = 2, kEvaluation = 3, kEvaluationShape = 4, kKinds = 5 };
// MPI guarantees tags up to 32767.
constexpr int kMaxTag = 32767;
constexpr int64_t kShapeSlots = 10;  // dtype, rank, up to 8 dims

}  // namespace

struct PipelineRunner::Slot {
  Tensor input;   // the stage's input as a leaf (undefined on the first stage)
  Tensor output;  // the stage's output (kept for the next stage on this rank and for sending)
  Tensor root;    // what backward starts from: the output, or the scaled loss on the last stage
  Tensor received_activation, received_gradient;
  std::shared_ptr<comm::Work> activation_work, gradient_work;
  autograd::WeightBackward weights;
};

PipelineRunner::PipelineRunner(models::Decoder& model, models::ModelParts parts, parallel::pipeline::Schedule schedule,
                               std::shared_ptr<comm::ProcessGroup> pp)
    : model_(model), parts_(std::move(parts)), schedule_(std::move(schedule)), pp_(std::move(pp)) {
  TITAN_CHECK(static_cast<int>(parts_.size()) == schedule_.stages,
              "pipeline: {} model parts for a schedule of {} stages", parts_.size(), schedule_.stages);
  TITAN_CHECK(schedule_.ranks == pp_->size(), "pipeline: a schedule for {} ranks on a pipeline group of {}",
              schedule_.ranks, pp_->size());
  TITAN_CHECK(tag(kKinds, 0, 0) <= kMaxTag,
              "pipeline: {} stages x {} micro-batches need more message tags than MPI guarantees ({})",
              schedule_.stages, schedule_.microbatches, kMaxTag);
}

bool PipelineRunner::holds_last_stage() const { return schedule_.stage_rank.back() == pp_->rank(); }

int PipelineRunner::tag(int kind, int stage, int microbatch) const {
  return (kind * schedule_.stages + stage) * schedule_.microbatches + microbatch;
}

// The shape and dtype of what crosses into `stage`: sent by the producer with
// its first activation, received by the consumer before its first receive.
Tensor PipelineRunner::post_receive_forward(Slot& slot, int stage, int microbatch, int kind,
                                            const models::DecoderInputs& inputs) {
  Boundary& boundary = boundaries_[{kind, stage}];
  const int from = schedule_.stage_rank[static_cast<size_t>(stage - 1)];
  if (!boundary.known && rehearsal_) {
    const Tensor& ids = inputs.input_ids;
    boundary = {{ids.size(0), ids.size(1) / rehearsal_->sequence_split, rehearsal_->dim}, rehearsal_->dtype, true};
  }
  if (!boundary.known) {
    Tensor meta = Tensor::zeros({kShapeSlots}, DType::i64);
    pp_->recv(meta, from, tag(kind == kEvaluation ? kEvaluationShape : kShape, stage, 0))->wait();
    // Once per boundary, on the first step (which graph capture never records: it refuses pipelines).
    AllowHostReadsScope shape_exchange;
    const std::vector<int64_t> values = meta.to_ints();
    boundary.dtype = static_cast<DType>(values[0]);
    boundary.shape.assign(values.begin() + 2, values.begin() + 2 + values[1]);
    boundary.known = true;
  }
  slot.received_activation = Tensor::empty(boundary.shape, boundary.dtype);
  slot.activation_work = pp_->recv(slot.received_activation, from, tag(kind, stage, microbatch));
  return slot.received_activation;
}

void PipelineRunner::post_receive_backward(Slot& slot, int stage, int microbatch) {
  // The gradient of this stage's output: the shape and dtype this stage sent forward.
  const Boundary& boundary = boundaries_.at({kActivation, stage + 1});
  slot.received_gradient = Tensor::empty(boundary.shape, boundary.dtype);
  slot.gradient_work = pp_->recv(slot.received_gradient, schedule_.stage_rank[static_cast<size_t>(stage + 1)],
                                 tag(kGradient, stage, microbatch));
}

void PipelineRunner::send_activation(const Tensor& activation, int stage, int microbatch, int kind) {
  const int to = schedule_.stage_rank[static_cast<size_t>(stage + 1)];
  Boundary& boundary = boundaries_[{kind, stage + 1}];
  if (!boundary.known) {
    TITAN_CHECK(activation.dim() <= kShapeSlots - 2, "pipeline: activations of {} dims", activation.dim());
    std::vector<int64_t> values(kShapeSlots, 0);
    values[0] = static_cast<int64_t>(activation.dtype());
    values[1] = activation.dim();
    for (int64_t d = 0; d < activation.dim(); ++d) values[static_cast<size_t>(d + 2)] = activation.size(d);
    sends_.push_back(pp_->send(Tensor::from_vector(values, {kShapeSlots}), to,
                               tag(kind == kEvaluation ? kEvaluationShape : kShape, stage + 1, 0)));
    boundary = {activation.shape(), activation.dtype(), true};
  }
  sends_.push_back(pp_->send(activation.contiguous(), to, tag(kind, stage + 1, microbatch)));
}

Tensor PipelineRunner::forward(int stage, const Tensor& input, const models::DecoderInputs& inputs,
                               const Tensor& labels, float loss_scale, Tensor* loss) {
  Tensor output = model_.forward_part(parts_[static_cast<size_t>(stage)], input, inputs);
  if (stage + 1 < schedule_.stages) return output;
  const Tensor value = model_.loss_function(output, model_.output_weight(), labels);
  *loss = value.detach();
  return loss_scale == 1.0f ? value : F::scale(value, loss_scale);
}

std::vector<Tensor> PipelineRunner::train(const std::vector<models::DecoderInputs>& inputs,
                                          const std::vector<Tensor>& labels, const std::vector<float>& loss_scales) {
  TITAN_CHECK(static_cast<int>(inputs.size()) == schedule_.microbatches &&
                  static_cast<int>(loss_scales.size()) == schedule_.microbatches,
              "pipeline: {} micro-batches ({} loss scales) for a schedule of {}", inputs.size(), loss_scales.size(),
              schedule_.microbatches);
  const auto pass_start = Clock::now();
  const int rank = pp_->rank(), last = schedule_.stages - 1;
  std::map<std::pair<int, int>, Slot> slots;
  std::vector<Tensor> losses(static_cast<size_t>(schedule_.microbatches));
  compute_seconds_ = 0.0;
  const std::vector<Action>& actions = schedule_.actions[static_cast<size_t>(rank)];
  // Once every boundary's shape is known, every receive of the step is posted up front.
  bool all_known = true;
  for (const Action& a : actions) {
    if (a.type == ActionType::recv_forward && !boundaries_[{kActivation, a.stage}].known) all_known = false;
    if (a.type == ActionType::recv_backward && !boundaries_[{kActivation, a.stage + 1}].known) all_known = false;
  }
  const auto post = [&](const Action& a) {
    Slot& slot = slots[{a.stage, a.microbatch}];
    if (a.type == ActionType::recv_forward && !slot.activation_work)
      post_receive_forward(slot, a.stage, a.microbatch, kActivation, inputs[static_cast<size_t>(a.microbatch)]);
    if (a.type == ActionType::recv_backward && !slot.gradient_work) post_receive_backward(slot, a.stage, a.microbatch);
  };
  if (all_known) {
    for (const Action& a : actions) {
      if (a.type == ActionType::recv_forward || a.type == ActionType::recv_backward) post(a);
    }
  }
  for (const Action& a : actions) {
    const auto key = std::make_pair(a.stage, a.microbatch);
    Slot& slot = slots[key];
    auto compute_start = Clock::now();  // restarted after any wait for a transfer
    switch (a.type) {
      case ActionType::recv_forward:
      case ActionType::recv_backward:
        post(a);
        continue;
      case ActionType::send_forward:
        send_activation(slot.output, a.stage, a.microbatch, kActivation);
        // Unless this rank also runs the next stage, the output is needed only as the backward root.
        if (schedule_.stage_rank[static_cast<size_t>(a.stage + 1)] != rank) slot.output = Tensor();
        continue;
      case ActionType::send_backward: {
        const Boundary& boundary = boundaries_.at({kActivation, a.stage});
        const Tensor grad = slot.input.grad();
        TITAN_CHECK(grad.defined(), "pipeline: stage {} micro-batch {} has no input gradient to send", a.stage,
                    a.microbatch);
        sends_.push_back(pp_->send(grad.to(boundary.dtype).contiguous(),
                                   schedule_.stage_rank[static_cast<size_t>(a.stage - 1)],
                                   tag(kGradient, a.stage - 1, a.microbatch)));
        slot.input = Tensor();
        continue;
      }
      case ActionType::forward: {
        Tensor input;
        if (a.stage > 0) {
          if (slot.activation_work) {
            slot.activation_work->wait();
            compute_start = Clock::now();
            input = slot.received_activation;
          } else {
            // The previous stage ran on this rank: hand its output over.
            input = slots.at({a.stage - 1, a.microbatch}).output.detach();
          }
          input.set_requires_grad(true);
          slot.input = input;
          slot.received_activation = Tensor();
          slot.activation_work.reset();
        }
        const size_t m = static_cast<size_t>(a.microbatch);
        if (before_each_forward_) before_each_forward_();
        slot.root = forward(a.stage, input, inputs[m], labels[m], loss_scales[m], &losses[m]);
        if (a.stage < last) slot.output = slot.root;
        break;
      }
      case ActionType::full_backward:
      case ActionType::backward_input: {
        Tensor grad;
        if (a.stage < last) {
          if (slot.gradient_work) {
            slot.gradient_work->wait();
            compute_start = Clock::now();
            grad = slot.received_gradient;
          } else {
            grad = slots.at({a.stage + 1, a.microbatch}).input.grad();
          }
          TITAN_CHECK(grad.defined(), "pipeline: no output gradient for stage {} micro-batch {}", a.stage,
                      a.microbatch);
        }
        const std::vector<Tensor> grads = grad.defined() ? std::vector<Tensor>{grad} : std::vector<Tensor>{};
        if (a.type == ActionType::full_backward) {
          autograd::backward({slot.root}, grads);
        } else {
          std::vector<Tensor> wanted;
          if (slot.input.defined()) wanted.push_back(slot.input);
          slot.weights = autograd::backward_input({slot.root}, grads, wanted);
        }
        slot.root = Tensor();
        slot.received_gradient = Tensor();
        slot.gradient_work.reset();
        break;
      }
      case ActionType::backward_weight:
        slot.weights.run();
        slot.weights = {};
        break;
    }
    compute_seconds_ += std::chrono::duration<double>(Clock::now() - compute_start).count();
  }
  for (const auto& send : sends_) send->wait();
  sends_.clear();
  pass_seconds_ = std::chrono::duration<double>(Clock::now() - pass_start).count();
  if (!holds_last_stage()) return {};
  return losses;
}

Tensor PipelineRunner::evaluate(const models::DecoderInputs& inputs, const Tensor& labels) {
  const int rank = pp_->rank();
  Tensor hidden, loss;
  for (int stage = 0; stage < schedule_.stages; ++stage) {
    if (schedule_.stage_rank[static_cast<size_t>(stage)] != rank) continue;
    if (stage > 0 && schedule_.stage_rank[static_cast<size_t>(stage - 1)] != rank) {
      Slot slot;
      hidden = post_receive_forward(slot, stage, 0, kEvaluation, inputs);
      slot.activation_work->wait();
    }
    hidden = forward(stage, hidden, inputs, labels, 1.0f, &loss);
    if (stage + 1 < schedule_.stages && schedule_.stage_rank[static_cast<size_t>(stage + 1)] != rank) {
      send_activation(hidden, stage, 0, kEvaluation);
    }
  }
  for (const auto& send : sends_) send->wait();
  sends_.clear();
  return loss;
}

}  // namespace titan::train
