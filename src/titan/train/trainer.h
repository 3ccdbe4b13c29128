// The training loop of one process, tying together components each built
// from its config section: the mesh, data and optimizer (train/job_setup.h),
// the model (train/job_model.h), each step's inputs (train/step_inputs.h),
// its device half (train/step_runner.h, or recorded once and replayed:
// train/captured_step.h), its figures (train/step_meter.h) and the
// checkpoints (train/training_state.h). It accumulates gradients over
// micro-batches, clips, steps AdamW on the LR schedule, validates, reports
// metrics every log_freq steps, resumes from the latest complete checkpoint,
// saves every checkpoint.interval steps, and on SIGTERM/SIGINT finishes the
// step, saves and returns. No parallelism is special-cased here: each is the
// business of the component that owns it.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/core/generator.h"
#include "titan/data/data_loader.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_schedule.h"
#include "titan/train/captured_step.h"
#include "titan/train/dump_folder_lock.h"
#include "titan/train/fault_tolerance.h"
#include "titan/train/goodput.h"
#include "titan/train/job_config.h"
#include "titan/train/job_model.h"
#include "titan/train/metrics.h"
#include "titan/train/step_inputs.h"
#include "titan/train/step_meter.h"
#include "titan/train/step_profiler.h"
#include "titan/train/step_runner.h"
#include "titan/train/training_state.h"

namespace titan::train {

class Trainer {
 public:
  // `batches` replaces the job's dataset (validation then needs the dataset and is refused).
  explicit Trainer(JobConfig config, BatchSource batches = {});
  ~Trainer();

  // Runs steps until training.steps (or a preemption signal); returns every step's metrics.
  const std::vector<StepMetrics>& train();
  // One optimizer step over all of its micro-batches.
  StepMetrics train_step();
  // Mean loss over the validation split (validation.steps batches at most).
  double validate();

  models::Decoder& model() { return *job_.model; }
  optim::AdamW& optimizer() { return *optimizer_; }
  int64_t step() const { return step_; }
  int64_t gradient_accumulation_steps() const { return micro_batches_; }
  const JobConfig& config() const { return config_; }
  // Where the job's wall time went so far (complete after train() returns).
  const Goodput& goodput() const { return goodput_; }
  const StepProfiler& step_profiler() const { return *step_profiler_; }

 private:
  // Rank 0: the job's banner (model, sizes, mesh, state bytes, LoRA).
  void print_banner() const;
  // Rank 0 of a launched job: its ranks, nodes and ranks per node.
  void print_nodes_line() const;
  // Rank 0 prints where the wall time went and adds it to metrics.jsonl.
  void report_goodput();

  JobConfig config_;
  std::chrono::steady_clock::time_point job_start_ = std::chrono::steady_clock::now();
  // Rank 0 holds it for the whole job (declared first: released last).
  std::unique_ptr<DumpFolderLock> dump_folder_lock_;
  Device device_;
  std::unique_ptr<comm::DeviceMesh> mesh_;
  int rank_ = 0;
  bool reports_ = false;  // this process prints and writes the job's reports (train/job_setup.h)
  std::unique_ptr<StepProfiler> step_profiler_;
  int64_t micro_batches_ = 1;
  std::unique_ptr<StepInputsBuilder> inputs_;
  std::unique_ptr<data::DataLoader> loader_;  // null when batches are injected
  BatchSource batches_;
  Generator generator_;
  JobModel job_;
  std::unique_ptr<optim::AdamW> optimizer_;
  optim::LrSchedule schedule_;
  std::unique_ptr<StepRunner> runner_;
  std::unique_ptr<CapturedStep> captured_;  // training.graph_capture
  std::unique_ptr<StepMeter> meter_;
  int64_t step_ = 0;
  std::unique_ptr<TrainingState> state_;
  // fault_tolerance.enable: this job is one replica group of several.
  std::unique_ptr<FaultTolerance> fault_tolerance_;
  std::unique_ptr<MetricsLogger> logger_;  // rank 0's
  std::vector<StepMetrics> history_;
  Goodput goodput_;
  // The last step the previous run of this job logged (rank 0): steps up to it are recomputed work.
  int64_t previous_run_last_step_ = 0;
  bool step_skipped_ = false;  // the step just run was skipped for non-finite values
  int64_t eager_steps_ = 0;    // steps run eagerly by this process (graph capture waits for warm-up)
};

}  // namespace titan::train
