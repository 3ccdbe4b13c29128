#include "titan/train/flux/flux_prepare.h"

#include <fmt/format.h>
#include <filesystem>

#include "titan/core/error.h"
#include "titan/data/image_captions.h"
#include "titan/data/image_tensor.h"
#include "titan/data/shapes_dataset.h"
#include "titan/train/config_loader.h"
#include "titan/train/flux/flux_dataset.h"
#include "titan/train/flux/flux_encoders.h"
#include "titan/train/flux/flux_encoding.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

FluxExamples encode_split(const std::vector<data::CaptionedImage>& items, const FluxEncoders& encoders,
                          int64_t img_size, const std::string& what, const FluxPrepareOptions& options) {
  return encode_examples(items, encoders, img_size, 16, [&](size_t done) {
    if (options.log) options.log(fmt::format("{}: encoded {} / {} images and captions", what, done, items.size()));
  });
}

std::vector<data::CaptionedImage> read_split(const std::string& captions, const std::string& images_dir) {
  if (captions.empty()) return {};
  const fs::path dir = images_dir.empty() ? fs::path(captions).parent_path() : fs::path(images_dir);
  return data::read_image_captions(captions, dir);
}

}  // namespace

void prepare_flux_dataset(const FluxPrepareOptions& options) {
  TITAN_CHECK(!options.output.empty(), "data prepare --images: --output is required");
  TITAN_CHECK(!options.job_config.empty(),
              "data prepare --images: --config is required (the job's [encoder] keys and training.img_size)");
  TITAN_CHECK((options.shapes > 0) != !options.captions.empty(),
              "data prepare --images: give either --captions (a captions.jsonl) or --shapes N, not both or neither");
  JobConfig config = parse_train_arguments({"--config", options.job_config}).config;
  const int64_t img_size = config.training.img_size;
  TITAN_CHECK(img_size > 0 && img_size % 16 == 0, "{}: training.img_size must be a positive multiple of 16, got {}",
              options.job_config, img_size);
  std::string captions = options.captions, validation_captions = options.validation_captions;
  std::string images_dir = options.images_dir;
  if (options.shapes > 0) {
    const fs::path root(options.output);
    data::ShapesOptions shapes;
    shapes.image_size = static_cast<int>(img_size);
    shapes.count = options.shapes;
    shapes.seed = static_cast<uint64_t>(config.training.seed);
    captions = data::write_shapes_dataset(root / "images", shapes).string();
    shapes.count = std::max<int64_t>(options.shapes / 10, 1);
    shapes.split = data::ShapesSplit::heldout;
    validation_captions = data::write_shapes_dataset(root / "images_heldout", shapes).string();
    images_dir.clear();
  }
  const FluxEncoders encoders(config);
  FluxDataset dataset;
  dataset.img_size = img_size;
  dataset.encoders_fingerprint = encoders.fingerprint();
  dataset.train = encode_split(read_split(captions, images_dir), encoders, img_size, "train", options);
  TITAN_CHECK(dataset.train.size() > 0, "{}: no images", captions);
  dataset.validation = encode_split(read_split(validation_captions, images_dir.empty() ? "" : images_dir), encoders,
                                    img_size, "validation", options);
  const TextEncodings empty = empty_prompt(encoders);
  dataset.empty_t5 = empty.t5;
  dataset.empty_clip = empty.clip;
  write_flux_dataset(options.output, dataset);
  if (options.log) {
    options.log(fmt::format("wrote {}: {} training and {} validation examples of {}x{} images (encoders {})",
                            options.output, dataset.train.size(), dataset.validation.size(), img_size, img_size,
                            dataset.encoders_fingerprint));
  }
}

}  // namespace titan::train::flux
