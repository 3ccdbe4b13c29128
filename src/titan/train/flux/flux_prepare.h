// `titan data prepare --images`: a FLUX dataset prepared once (flux_dataset.h
// layout). Each image is decoded, resized and centre-cropped to the job's
// training.img_size and encoded by the job's autoencoder; each caption is
// encoded by its T5 and CLIP; the empty caption too (caption dropout's
// stand-in). The encoders are the job config's [encoder] keys, and their
// fingerprint is recorded.
#pragma once

#include <functional>
#include <string>

namespace titan::train::flux {

struct FluxPrepareOptions {
  std::string captions;             // captions.jsonl: {"image": path, "caption": text} per line
  std::string images_dir;           // where the image paths are relative to (default: the captions file's folder)
  std::string validation_captions;  // the same for the validation split (optional)
  // Instead of the files above: this many images of the synthetic
  // coloured-shapes dataset (data/shapes_dataset.h) are drawn into
  // <output>/images (and a tenth as many, of the held-out captions, into
  // <output>/images_heldout for validation).
  int64_t shapes = 0;
  std::string output;
  std::string job_config;  // the job's TOML: [encoder] and training.img_size, training.seed
  std::function<void(const std::string&)> log;
};

void prepare_flux_dataset(const FluxPrepareOptions& options);

}  // namespace titan::train::flux
