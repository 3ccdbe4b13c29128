// The trainer's side of checkpoints: what state a job saves (the model's and
// AdamW's boxes, the schedule, the loader's cursor, the RNG, the step),
// resuming from the newest complete checkpoint or an initial load path, and
// the last save: the full state, or the model export (whole weights gathered
// from every shard, tensor- and expert-parallel part and pipeline stage),
// possibly as a Hugging Face folder.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/generator.h"
#include "titan/data/data_loader.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_schedule.h"
#include "titan/train/checkpointer.h"
#include "titan/train/fast_tier.h"
#include "titan/train/job_model.h"

namespace titan::train {

// This rank's boxes of every parameter of `model` and its AdamW moments, and
// of the model's persistent buffers (live tensors), as checkpoints name them
// ("model.<fqn>", "optimizer.exp_avg.<fqn>"). Replicas (over dp_replicate,
// and over tp for parameters it does not split) are written by their first holder.
std::vector<StateTensor> state_tensors_of(nn::Module& model, const optim::AdamW& optimizer,
                                          const comm::DeviceMesh& mesh);

class TrainingState {
 public:
  // What a checkpoint holds, by reference: the trainer owns it. `loader` is
  // null when batches come from elsewhere (no cursor to save).
  struct Parts {
    int64_t& step;
    JobModel& job;
    optim::AdamW& optimizer;
    const optim::LrSchedule& schedule;
    Generator& generator;
    data::DataLoader* loader;
  };
  TrainingState(const JobConfig& config, const comm::DeviceMesh& mesh, Device device, Parts parts);

  // Loads the newest complete checkpoint of this job (or checkpoint.load_step),
  // else a titan checkpoint at checkpoint.initial_load_path (its weights, or
  // with initial_load_model_only = false its training state); removes the
  // incomplete ones an interrupted save left. Then refuses loaded weights
  // holding NaN or Inf (checkpoint.allow_nonfinite_weights warns instead).
  void resume();
  // The step resumed at (-1: started afresh).
  int64_t resumed_step() const { return resumed_step_; }

  // Saves the current step's full state (every rank); returns the seconds it held the run up.
  double save(bool async);
  // The fast tiers (checkpoint.local_interval): whether `step` saves one, and the save (every rank).
  bool fast_tier_due(int64_t step) const { return fast_tier_.due(step); }
  FastTier::Cost save_fast();
  FastTier& fast_tier() { return fast_tier_; }
  // The tier the job resumed from ("fast", "replica", "persistent"; "" when it
  // started afresh) and the seconds the restore took.
  const std::string& restart_tier() const { return restart_tier_; }
  double recover_seconds() const { return recover_seconds_; }
  // checkpoint.create_seed_checkpoint: the initial weights alone, as step 0.
  void save_seed();
  // Every rank, once per step: whether any rank asked to stop; publishes a finished async save.
  bool end_of_step(bool stop_requested) { return checkpointer_.end_of_step(stop_requested); }
  // Waits for a save in flight and publishes it.
  void wait() { checkpointer_.wait(); }
  // The last step's save (every rank): with checkpoint.enable (and not
  // load_only) the model export in checkpoint.export_dtype, or the Hugging
  // Face folder (last_save_in_hf), or with last_save_model_only = false the
  // full state; nothing when no step ran since the load.
  void finish();

 private:
  // This rank's boxes of every parameter and AdamW moment (live tensors).
  std::vector<StateTensor> state_tensors();
  nlohmann::json job_state(const std::vector<std::string>& contents) const;
  nlohmann::json rank_state() const;
  // The newest complete checkpoint (or checkpoint.load_step), else checkpoint.initial_load_path.
  void load_newest();
  void load(const std::string& folder, const std::vector<std::string>& parts);
  // The non-tensor state (step, RNG, optimizer steps, LR schedule check, data loader) of a loaded checkpoint.
  void apply_state(const nlohmann::json& state, const std::vector<std::string>& contents,
                   const std::vector<std::string>& parts, const std::string& folder);

  const JobConfig& config_;
  const comm::DeviceMesh& mesh_;
  Device device_;
  Parts parts_;
  int rank_ = 0;
  Checkpointer checkpointer_;
  FastTier fast_tier_;
  std::string restart_tier_, loaded_from_;
  double recover_seconds_ = 0.0;
  int64_t resumed_step_ = -1;
  int64_t start_step_ = 0;  // the step training started from (after any load)
};

}  // namespace titan::train
