#include "titan/train/flux/flux_job.h"

#include "titan/core/error.h"
#include "titan/train/flux/flux_dataset.h"
#include "titan/train/flux/flux_encoders.h"

namespace titan::train::flux {

std::unique_ptr<FluxTrainer> make_flux_trainer(const JobConfig& config) {
  const std::string& path = config.training.dataset_path;
  TITAN_CHECK(is_flux_dataset(path),
              "training.dataset_path {} is not a prepared FLUX dataset (no manifest.json of format "
              "titan-flux-latents): `titan data prepare --images DIR --captions FILE --output {}` writes one",
              path, path);
  const auto dataset = std::make_shared<const FluxDataset>(read_flux_dataset(path));
  return std::make_unique<FluxTrainer>(config, [dataset, &config](const comm::DeviceMesh& mesh) {
    FluxData data = flux_data(*dataset, config, mesh);
    // Validation images need the decoder of the autoencoder the dataset was encoded with.
    if (config.validation.enable && config.validation.save_img_count != 0) data.decode = latent_decoder(config);
    return data;
  });
}

}  // namespace titan::train::flux
