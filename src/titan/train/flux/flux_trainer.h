// The training loop of a FLUX job (model.name = "flux"): the rectified-flow
// objective on batches of encoded images (flux_batch.h), with the job's mesh,
// AdamW on its LR schedule, gradient clipping, FSDP/HSDP, activation
// checkpointing and mixed precision (models/flux/parallelize_flux.h),
// checkpoints, validation at fixed timesteps and every step's metrics, each
// built from the same config sections as the language-model trainer's.
//
// Each step draws, per example, a timestep (training.timestep_sampling) and
// the noise, and with probability training.classifier_free_guidance_prob
// replaces its T5 and (independently) its CLIP encoding by the empty
// prompt's, so that the model also learns the unconditional velocity that
// classifier-free guidance needs. An example's draws come from the seed and
// its place in the run's sequence of examples alone: however examples are
// spread over ranks and micro-batches, and across a resume, each gets the
// same noise, so every layout trains the same model.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/core/generator.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_schedule.h"
#include "titan/parallel/parallelized_model.h"
#include "titan/train/checkpointer.h"
#include "titan/train/dump_folder_lock.h"
#include "titan/train/flux/flux_batch.h"
#include "titan/train/job_config.h"
#include "titan/train/metrics.h"
#include "titan/train/step_meter.h"

namespace titan::train::flux {

// Where a FLUX job's examples come from: training batches, the held-out
// batches validation walks in order (reset before each evaluation), and the
// empty prompt's encodings caption dropout substitutes ([Lt, d] and [d]).
struct FluxData {
  FluxBatchSource train;
  std::function<void(int64_t batches)> seek_train;  // on resume: as if `batches` had been drawn (null: ignored)
  std::function<void()> reset_validation;           // null: no validation split
  FluxBatchSource validation;
  Tensor empty_t5, empty_clip;
  // For the validation images: the prompts (their encodings in a batch, the
  // latents giving the size) and captions, and the autoencoder's decoder
  // (latents -> images [B, 3, S, S] in [-1, 1]; null: no images).
  FluxBatch image_prompts;
  std::vector<std::string> image_captions;
  std::function<Tensor(const Tensor& latents)> decode;
};
// The data for this rank of the job's mesh (built before the data is).
using FluxDataFactory = std::function<FluxData(const comm::DeviceMesh& mesh)>;

// The job's transformer: model.hf_config (a Diffusers config.json) or the
// flavor, its text widths following the encoders' (as a language model's
// vocabulary follows its tokenizer): T5's `t5_width`, CLIP's `clip_width`.
models::flux::FluxConfig job_transformer_config(const JobConfig& config, int64_t t5_width, int64_t clip_width);

class FluxTrainer {
 public:
  FluxTrainer(JobConfig config, const FluxDataFactory& make_data);
  ~FluxTrainer();

  // Runs steps until training.steps (or a preemption signal); returns every step's metrics.
  const std::vector<StepMetrics>& train();
  StepMetrics train_step();
  // Mean loss over validation.steps held-out batches, each example at one of
  // 8 stratified timesteps in turn (or at all 8: validation.all_timesteps),
  // with noise drawn from a fixed seed: comparable from one evaluation to the next.
  double validate();

  models::flux::FluxModel& model() { return *model_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  int64_t step() const { return step_; }

 private:
  // The noise [B, C, H, W] and timesteps [B] of a training batch, with its
  // captions dropped (in place) at training.classifier_free_guidance_prob.
  std::pair<Tensor, Tensor> training_draws(FluxBatch& batch) const;
  // validation.save_img_count images sampled for the first validation
  // captions (every rank samples the whole sequence, context-parallel ranks
  // too: FSDP gathers in each forward), written by
  // the reporting rank to <dump_folder>/<save_img_folder>/step-N/ and TensorBoard.
  void save_validation_images();
  void save_checkpoint();
  void resume();
  void print_banner() const;

  JobConfig config_;
  std::unique_ptr<DumpFolderLock> dump_folder_lock_;
  Device device_;
  std::unique_ptr<comm::DeviceMesh> mesh_;
  bool reports_ = false;
  FluxData data_;
  DType compute_dtype_ = DType::f32;
  int64_t micro_batches_ = 1;
  TokenSlice tokens_;  // this rank's share of each example's tokens (context parallelism)
  std::shared_ptr<models::flux::FluxModel> model_;
  std::unique_ptr<parallel::ParallelizedModel> parallelized_;
  std::unique_ptr<optim::AdamW> optimizer_;
  optim::LrSchedule schedule_;
  std::unique_ptr<StepMeter> meter_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<MetricsLogger> logger_;  // the reporting rank's
  std::vector<StepMetrics> history_;
  int64_t step_ = 0;
  int64_t parameters_ = 0;
  size_t float8_linears_ = 0;  // the Linears a quantize.linear.* converter changed
};

}  // namespace titan::train::flux
