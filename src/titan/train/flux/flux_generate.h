// `titan generate --image`: a trained FLUX job's transformer (a checkpoint
// step folder of that job), its encoders (the job's [encoder] keys), one
// prompt in, one PNG out.
#pragma once

#include <string>

#include "titan/train/flux/flux_sampler.h"

namespace titan::train::flux {

struct FluxGenerateOptions {
  std::string job_config;  // the job's TOML
  std::string checkpoint;  // a step folder the job saved (<dump_folder>/<checkpoint.folder>/step-N)
  std::string prompt;
  std::string output;  // out.png
  SamplingOptions sampling;
};

// Samples the image, decodes it, writes `output`. Returns the image [3, S, S] in [-1, 1].
Tensor generate_flux_image(const FluxGenerateOptions& options);

}  // namespace titan::train::flux
