// A FLUX job from its config alone: the trainer over the data that
// training.dataset_path names: a folder `titan data prepare --images` wrote,
// or a captions .jsonl whose images and captions the job's encoders encode a
// batch at a time (validation.dataset_path: another, for validation).
#pragma once

#include <memory>

#include "titan/train/flux/flux_trainer.h"
#include "titan/train/job_config.h"

namespace titan::train::flux {

std::unique_ptr<FluxTrainer> make_flux_trainer(const JobConfig& config);

}  // namespace titan::train::flux
