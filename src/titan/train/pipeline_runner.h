// Runs one pipeline rank's share of a schedule (parallel/pipeline_schedule.h):
// its actions in order, for every stage it holds. Forwards take token ids
// (the first stage) or the activation another stage sent (or this rank's own
// previous stage handed over); the last stage adds the loss. Backwards run
// whole (B) or split (I now, W later: autograd::backward_input). Receives are
// posted as soon as their shapes are known, sends as soon as their tensor
// exists, so transfers overlap compute; the shape and dtype crossing each
// stage boundary are sent once, with the first activation.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "titan/autograd/engine.h"
#include "titan/comm/process_group.h"
#include "titan/models/decoder.h"
#include "titan/models/model_parts.h"
#include "titan/parallel/pipeline_schedule.h"

namespace titan::train {

class PipelineRunner {
 public:
  // `parts` lists every stage's modules; `model` holds (at least) this rank's.
  PipelineRunner(models::Decoder& model, models::ModelParts parts, parallel::pipeline::Schedule schedule,
                 std::shared_ptr<comm::ProcessGroup> pp);

  // One pass of the schedule over `inputs` (one entry per micro-batch):
  // gradients accumulate in the parameters, micro-batch m's loss scaled by
  // `loss_scales[m]` first (the trainer weighs each by its counted labels).
  // Returns the unscaled losses (0-d f32) on the rank of the last stage,
  // nothing on the others.
  std::vector<Tensor> train(const std::vector<models::DecoderInputs>& inputs, const std::vector<Tensor>& labels,
                            const std::vector<float>& loss_scales);
  // Forward only, stage after stage (validation): the loss on the last stage's rank.
  Tensor evaluate(const models::DecoderInputs& inputs, const Tensor& labels);

  bool holds_last_stage() const;
  const parallel::pipeline::Schedule& schedule() const { return schedule_; }
  // A rehearsal (comm.mode = fake_backend) has no previous stage to send the
  // shape of what crosses into this one: take it to be the decoder's hidden
  // states of the micro-batch, [batch, its sequence / sequence_split, dim]
  // in `dtype` (sequence_split: tensor parallelism's, which splits the
  // residual stream along the sequence).
  void rehearse_boundaries(int64_t sequence_split, int64_t dim, DType dtype) {
    rehearsal_ = RehearsalBoundary{sequence_split, dim, dtype};
  }
  // Runs before every forward of a stage's micro-batch (FSDP counts each one's uses apart).
  void before_each_forward(std::function<void()> hook) { before_each_forward_ = std::move(hook); }
  // Seconds the last train() took, and spent in compute actions (the rest was
  // waiting for other stages: the bubble, and transfers not hidden by compute).
  double pass_seconds() const { return pass_seconds_; }
  double compute_seconds() const { return compute_seconds_; }

 private:
  struct Slot;  // one (stage, micro-batch)'s tensors while in flight
  struct Boundary {
    Shape shape;
    DType dtype = DType::f32;
    bool known = false;  // received (or sent) once
  };

  struct RehearsalBoundary {
    int64_t sequence_split, dim;
    DType dtype;
  };

  int tag(int kind, int stage, int microbatch) const;
  Tensor post_receive_forward(Slot& slot, int stage, int microbatch, int kind, const models::DecoderInputs& inputs);
  void post_receive_backward(Slot& slot, int stage, int microbatch);
  Tensor forward(int stage, const Tensor& input, const models::DecoderInputs& inputs, const Tensor& labels,
                 float loss_scale, Tensor* loss);
  void send_activation(const Tensor& activation, int stage, int microbatch, int kind);

  models::Decoder& model_;
  models::ModelParts parts_;
  parallel::pipeline::Schedule schedule_;
  std::shared_ptr<comm::ProcessGroup> pp_;
  std::map<std::pair<int, int>, Boundary> boundaries_;  // by (message kind, receiving stage)
  std::optional<RehearsalBoundary> rehearsal_;
  std::function<void()> before_each_forward_;
  std::vector<std::shared_ptr<comm::Work>> sends_;
  double pass_seconds_ = 0.0, compute_seconds_ = 0.0;
};

}  // namespace titan::train
