#include "titan/train/flux/flux_job.h"

#include "titan/core/error.h"
#include "titan/train/flux/flux_dataset.h"
#include "titan/train/flux/flux_encoders.h"
#include "titan/train/flux/flux_encoding.h"

namespace titan::train::flux {

namespace {

// The trainer over `make`'s data, given the autoencoder's decoder when validation images are asked for.
std::unique_ptr<FluxTrainer> trainer_over(const JobConfig& config, const FluxDataFactory& make) {
  const bool decodes = config.validation.enable && config.validation.save_img_count != 0;
  return std::make_unique<FluxTrainer>(config, [make, &config, decodes](const comm::DeviceMesh& mesh) {
    FluxData data = make(mesh);
    if (decodes) data.decode = latent_decoder(config);
    return data;
  });
}

}  // namespace

std::unique_ptr<FluxTrainer> make_flux_trainer(const JobConfig& config) {
  const std::string& path = config.training.dataset_path;
  if (path.ends_with(".jsonl")) {
    // Encoded on the fly: the encoders are built once, before the mesh, and shared by every batch.
    auto source = std::make_shared<const FluxSource>(on_the_fly_source(config));
    return trainer_over(config,
                        [source, &config](const comm::DeviceMesh& mesh) { return flux_data(*source, config, mesh); });
  }
  TITAN_CHECK(is_flux_dataset(path),
              "training.dataset_path {} is neither a prepared FLUX dataset (no manifest.json of format "
              "titan-flux-latents: `titan data prepare --images DIR --captions FILE --output {}` writes one) nor a "
              "captions .jsonl to encode on the fly",
              path, path);
  TITAN_CHECK(config.validation.dataset_path.empty(),
              "validation.dataset_path {}: a prepared dataset validates on its own validation split (training."
              "dataset_path {}); validation.dataset_path goes with a captions .jsonl encoded on the fly",
              config.validation.dataset_path, path);
  const auto dataset = std::make_shared<const FluxDataset>(read_flux_dataset(path));
  // A job that names its encoders (to decode validation images, or to sample
  // later with titan generate) must name the ones the data was encoded with.
  if (!config.encoder.t5_encoder.empty() || !config.encoder.clip_encoder.empty()) {
    const std::string job = encoders_fingerprint(config);
    TITAN_CHECK(job == dataset->encoders_fingerprint,
                "training.dataset_path {} was encoded by other encoders (fingerprint {}) than the job's [encoder] "
                "keys name (fingerprint {}): prepare it again with this job's config, or name the encoders it was "
                "prepared with (encoder.t5_encoder, clip_encoder, autoencoder, max_t5_encoding_len, random_init with "
                "training.seed)",
                path, dataset->encoders_fingerprint, job);
  }
  return trainer_over(config,
                      [dataset, &config](const comm::DeviceMesh& mesh) { return flux_data(*dataset, config, mesh); });
}

}  // namespace titan::train::flux
