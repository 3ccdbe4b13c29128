// The trainer's side of checkpoints: what state a job saves (the model's and
// AdamW's boxes, the schedule, the loader's cursor, the RNG, the step),
// resuming from the newest complete checkpoint or an initial load path, and
// the final save with the model export (whole weights gathered from every
// shard, tensor- and expert-parallel part and pipeline stage).
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
#include "titan/train/job_model.h"

namespace titan::train {

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
  // else a titan checkpoint at checkpoint.initial_load_path; removes the
  // incomplete ones an interrupted save left. Then refuses loaded weights
  // holding NaN or Inf (checkpoint.allow_nonfinite_weights warns instead).
  void resume();
  // The step resumed at (-1: started afresh).
  int64_t resumed_step() const { return resumed_step_; }

  // Saves the current step (every rank); returns the seconds it held the run up.
  double save(bool async, const std::function<void(const std::string&)>& on_publish = {},
              const std::function<void(const std::string&)>& on_staged = {});
  // checkpoint.create_seed_checkpoint: the initial weights alone, as step 0.
  void save_seed();
  // Every rank, once per step: whether any rank asked to stop; publishes a finished async save.
  bool end_of_step(bool stop_requested) { return checkpointer_.end_of_step(stop_requested); }
  // Waits for a save in flight and publishes it.
  void wait() { checkpointer_.wait(); }
  // The final save with the model export or, without checkpoints, the export alone.
  void finish();

 private:
  // This rank's boxes of every parameter and AdamW moment (live tensors).
  std::vector<StateTensor> state_tensors();
  nlohmann::json job_state(const std::vector<std::string>& contents) const;
  nlohmann::json rank_state() const;
  // The newest complete checkpoint (or checkpoint.load_step), else checkpoint.initial_load_path.
  void load_newest();
  void load(const std::string& folder, const std::vector<std::string>& parts);

  const JobConfig& config_;
  const comm::DeviceMesh& mesh_;
  Device device_;
  Parts parts_;
  int rank_ = 0;
  Checkpointer checkpointer_;
  int64_t resumed_step_ = -1;
};

}  // namespace titan::train
