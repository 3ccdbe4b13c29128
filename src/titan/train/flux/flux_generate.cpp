#include "titan/train/flux/flux_generate.h"

#include "titan/core/error.h"
#include "titan/data/image_file.h"
#include "titan/data/image_tensor.h"
#include "titan/train/checkpointer.h"
#include "titan/train/config_loader.h"
#include "titan/train/flux/flux_encoders.h"
#include "titan/train/flux/flux_trainer.h"

namespace titan::train::flux {

Tensor generate_flux_image(const FluxGenerateOptions& options) {
  TITAN_CHECK(!options.output.empty(), "generate --image: --output is required (a .png path)");
  const JobConfig config = parse_train_arguments({"--config", options.job_config}).config;
  TITAN_CHECK(config.model.name == "flux", "{}: model.name is {}, not flux", options.job_config, config.model.name);
  const FluxEncoders encoders(config);
  const TextEncodings prompt = encoders.encode_captions({options.prompt});
  const TextEncodings empty = encoders.encode_captions({""});
  // The transformer as the job built it.
  const models::flux::FluxModel model(job_transformer_config(config, prompt.t5.size(2), prompt.clip.size(1)));
  std::vector<StateTensor> tensors;
  for (auto& [name, parameter] : const_cast<models::flux::FluxModel&>(model).named_parameters()) {
    tensors.push_back({"model." + name, "model", parameter->data, parameter->data.shape(),
                       std::vector<int64_t>(parameter->data.shape().size(), 0), true});
  }
  Checkpointer::load(options.checkpoint, tensors, {"model"});
  const int64_t latent_side = config.training.img_size / 8;
  const Tensor latents =
      sample_latents(model, prompt.t5, prompt.clip, empty.t5.narrow(0, 0, 1).view({empty.t5.size(1), empty.t5.size(2)}),
                     empty.clip.narrow(0, 0, 1).view({empty.clip.size(1)}), latent_side, latent_side, options.sampling);
  const Tensor image = encoders.decode_latents(latents);
  Tensor first = image.narrow(0, 0, 1).view({3, image.size(2), image.size(3)}).contiguous();
  data::write_png(options.output, data::tensor_to_image(first, options.output));
  return first;
}

}  // namespace titan::train::flux
