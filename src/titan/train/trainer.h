// The training loop of one process: builds the model from the job config,
// feeds it the data loader's batches, accumulates gradients over
// micro-batches, clips, steps AdamW on the LR schedule, validates, and
// reports metrics every log_freq steps. It resumes from the latest complete
// checkpoint, saves every checkpoint.interval steps, and on SIGTERM/SIGINT
// finishes the step, saves and returns.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "titan/core/generator.h"
#include "titan/core/step_recorder.h"
#include "titan/data/data_loader.h"
#include "titan/parallel/context_parallel.h"
#include "titan/comm/device_mesh.h"
#include "titan/parallel/fsdp.h"
#include "titan/models/decoder.h"
#include "titan/models/model_spec.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_schedule.h"
#include "titan/train/checkpointer.h"
#include "titan/train/dump_folder_lock.h"
#include "titan/train/goodput.h"
#include "titan/train/job_config.h"
#include "titan/train/metrics.h"
#include "titan/train/pipeline_runner.h"
#include "titan/train/step_profiler.h"

namespace titan::train {

// Where micro-batches come from: the job's dataset by default; tests inject fixed batches.
using BatchSource = std::function<data::Batch()>;

class Trainer {
 public:
  explicit Trainer(JobConfig config, BatchSource batches = {});
  ~Trainer();

  // Runs steps until training.steps (or a preemption signal); returns every step's metrics.
  const std::vector<StepMetrics>& train();
  // One optimizer step (all micro-batches); exposed for tests.
  StepMetrics train_step();
  // Mean loss over the validation split (validation.steps batches at most).
  double validate();

  models::Decoder& model() { return *model_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  data::DataLoader* loader() { return loader_.get(); }
  int64_t step() const { return step_; }
  int64_t gradient_accumulation_steps() const { return accumulation_; }
  const JobConfig& config() const { return config_; }
  const comm::DeviceMesh& mesh() const { return *mesh_; }
  // This rank's boxes of every parameter and AdamW moment (live tensors).
  std::vector<StateTensor> state_tensors();
  // Loads a checkpoint folder's `parts` (model, optimizer, lr_scheduler, dataloader, train_state).
  void load_checkpoint(const std::string& folder, const std::vector<std::string>& parts);
  bool stopped_by_signal() const { return stopped_by_signal_; }
  // Where the job's wall time went so far (complete after train() returns).
  const Goodput& goodput() const { return goodput_; }
  const StepProfiler& step_profiler() const { return *step_profiler_; }
  // Test hook: at `step`, after backward, the gradient of `parameter` (an FQN
  // this rank holds) gets a NaN, as a bad batch or an overflow would leave it.
  void inject_nonfinite_gradient(int64_t step, std::string parameter) {
    nonfinite_injection_ = {step, std::move(parameter)};
  }

 private:
  // One step's micro-batches, on the device.
  struct StepInputs {
    std::vector<models::DecoderInputs> inputs;
    std::vector<Tensor> labels;
    // Per loss (a micro-batch's, or under pipeline parallelism each pipeline
    // micro-batch's within it): this rank's counted labels (not
    // data::kIgnoreIndex), and what the loss (a mean over them) is multiplied
    // by before backward: labels x data-(and context-)parallel ranks / the
    // global batch's labels. The gradients' average over those ranks then
    // makes the step's loss the mean over every trained label of the global
    // batch, however unevenly masks spread them (see token_loss_scales).
    std::vector<int64_t> label_counts;
    std::vector<float> loss_scales;
    // The same scales as 0-d f32 tensors on the device: a recorded step
    // (graph capture) reads them, so new counts need only a refill.
    std::vector<Tensor> loss_scale_tensors;
  };
  // What the device half of a step leaves for the host to read after it.
  struct StepOutputs {
    std::vector<Tensor> losses;      // each micro-batch's loss (0-d f32)
    std::vector<Tensor> aux_losses;  // each micro-batch's MoE auxiliary loss (none without one)
    Tensor clip;                     // [gradient norm, clipping factor] f32
  };
  // A step recorded once (training.graph_capture) and replayed on static inputs.
  struct CapturedStep {
    std::unique_ptr<StepRecorder> recorder;
    StepInputs inputs;
    StepOutputs outputs;
  };

  // This rank's part of a loaded batch: the whole of it, or its slice of every sequence under context parallelism.
  data::Batch local_batch(const data::Batch& batch) const;
  models::DecoderInputs model_inputs(const data::Batch& batch) const;
  // Forward, backward, gradient synchronisation and clipping, optimizer update:
  // device work only (run under NoHostReadsScope), so it can be recorded.
  // `apply_update` false leaves the optimizer step to the caller (after the non-finite check).
  StepOutputs run_device_step(const StepInputs& step, bool apply_update);
  StepOutputs replay_captured_step(const StepInputs& step);
  // The average of a per-rank number over the data- and context-parallel ranks.
  double mean_over_dp(double value) const;
  // Fills step.loss_scales (and their device tensors) from step.label_counts:
  // one small all-reduce of the count over the data- and context-parallel
  // ranks; returns the global batch's trained labels.
  int64_t token_loss_scales(StepInputs& step) const;
  // Every context-parallel rank's attention and K/V wait seconds and peak memory this step, into the metrics.
  void context_parallel_metrics(StepMetrics& metrics) const;
  // After a step: every MoE layer's tokens per expert, summed over the ranks
  // that routed different tokens, into the expert-load metrics and the
  // aux-loss-free bias update; then cleared for the next step.
  void finish_moe_step(StepMetrics& metrics);
  // Sums tensor-parallel partial gradients, clips by the global norm; returns [norm, factor] on the device.
  Tensor synchronize_and_clip_gradients();
  // A step whose loss or gradient norm is not finite: skipped (training.skip_nonfinite_steps)
  // or, after a checkpoint of the weights before it, the end of the job with the culprit named.
  void handle_nonfinite_step(const StepMetrics& metrics, bool update_applied);
  // The first parameter (in model order, on the lowest rank that has one) whose
  // gradient holds a NaN or Inf; "" when none. Collective over the world.
  std::string first_nonfinite_gradient();
  // Pipeline parallelism (trainer_pipeline.cpp): the schedule and this rank's
  // model parts, checked before anything runs; the rest of the model dropped.
  void setup_pipeline(const models::ModelSpec& spec);
  // One pipeline pass per accumulation step over its micro-batches.
  void run_pipeline_step(const StepInputs& step, StepOutputs& out);
  // For the export: on the first pipeline rank, a whole model holding every
  // stage's weights (`full`: this rank's gathered parameters); elsewhere sends them there and returns null.
  std::shared_ptr<models::Decoder> gather_pipeline_model(const std::vector<std::pair<nn::Parameter*, Tensor>>& full);
  // The sum over pipeline ranks of a number only some of them have (the loss on the last stage's).
  double sum_over_pp(double value) const;
  // Every pipeline rank's bubble and peak memory this step, into the metrics.
  void pipeline_metrics(StepMetrics& metrics) const;
  void resume();
  // Rank 0 prints where the wall time went and adds it to metrics.jsonl.
  void report_goodput();
  nlohmann::json job_state(const std::vector<std::string>& contents) const;
  nlohmann::json rank_state() const;
  double save_checkpoint(bool async, const std::function<void(const std::string&)>& on_publish = {});
  // The final save (with the model export) or, without checkpoints, the export alone.
  void finish();

  JobConfig config_;
  std::chrono::steady_clock::time_point job_start_ = std::chrono::steady_clock::now();
  std::unique_ptr<StepProfiler> step_profiler_;
  Goodput goodput_;
  // The last step the previous run of this job logged (rank 0): steps up to it are recomputed work.
  int64_t previous_run_last_step_ = 0;
  bool step_skipped_ = false;  // the step just run was skipped for non-finite values
  std::pair<int64_t, std::string> nonfinite_injection_{-1, ""};
  // Rank 0 holds it for the whole job (declared first: released last).
  std::unique_ptr<DumpFolderLock> dump_folder_lock_;
  Device device_;
  std::unique_ptr<comm::DeviceMesh> mesh_;
  std::shared_ptr<parallel::Fsdp> fsdp_;
  // Context parallelism: how sequences are cut over cp, and the attention layers' ring.
  std::optional<parallel::SequenceLayout> context_layout_;
  std::shared_ptr<parallel::RingAttention> ring_attention_;
  int rank_ = 0;
  std::unique_ptr<data::DataLoader> loader_;
  BatchSource batches_;
  std::shared_ptr<models::Decoder> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  optim::LrSchedule schedule_;
  std::unique_ptr<MetricsLogger> logger_;
  std::vector<StepMetrics> history_;
  Generator generator_;
  std::unique_ptr<Checkpointer> checkpointer_;
  int64_t resumed_step_ = -1;
  bool stopped_by_signal_ = false;
  int64_t step_ = 0;
  int64_t eager_steps_ = 0;  // steps run eagerly by this process (graph capture waits for warm-up)
  std::unique_ptr<CapturedStep> captured_;
  std::unique_ptr<PipelineRunner> pipeline_;  // null without pipeline parallelism
  models::ModelParts pipeline_parts_;
  int64_t pipeline_microbatches_ = 1;                                    // per accumulation step
  double pipeline_pass_seconds_ = 0.0, pipeline_compute_seconds_ = 0.0;  // this step's, all passes
  int64_t accumulation_ = 1;
  double flops_per_token_ = 0.0;
  double peak_tflops_ = 0.0;
  double elapsed_seconds_ = 0.0;
};

}  // namespace titan::train
