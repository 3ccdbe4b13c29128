#include "titan/train/flux/flux_prepare.h"

#include <fmt/format.h>
#include <filesystem>

#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/data/image_captions.h"
#include "titan/data/image_tensor.h"
#include "titan/data/shapes_dataset.h"
#include "titan/train/config_loader.h"
#include "titan/train/flux/flux_dataset.h"
#include "titan/train/flux/flux_encoders.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

// Images encoded per autoencoder call.
constexpr size_t kEncodeBatch = 16;

Tensor stack(const std::vector<Tensor>& parts) {
  Shape shape = parts.front().shape();
  shape.insert(shape.begin(), static_cast<int64_t>(parts.size()));
  Tensor all = Tensor::empty(shape, parts.front().dtype());
  for (size_t i = 0; i < parts.size(); ++i) copy_(all.narrow(0, static_cast<int64_t>(i), 1), parts[i].unsqueeze(0));
  return all;
}

FluxExamples encode_split(const std::vector<data::CaptionedImage>& items, const FluxEncoders& encoders,
                          int64_t img_size, const std::string& what, const FluxPrepareOptions& options) {
  FluxExamples out;
  if (items.empty()) return out;
  std::vector<Tensor> latents, t5, clip;
  for (size_t start = 0; start < items.size(); start += kEncodeBatch) {
    const size_t end = std::min(items.size(), start + kEncodeBatch);
    std::vector<Tensor> images;
    std::vector<std::string> captions;
    for (size_t i = start; i < end; ++i) {
      images.push_back(data::load_image_tensor(items[i].image, static_cast<int>(img_size)));
      captions.push_back(items[i].caption);
    }
    latents.push_back(encoders.encode_images(stack(images)));
    const TextEncodings text = encoders.encode_captions(captions);
    t5.push_back(text.t5);
    clip.push_back(text.clip);
    out.captions.insert(out.captions.end(), captions.begin(), captions.end());
    if (options.log) options.log(fmt::format("{}: encoded {} / {} images and captions", what, end, items.size()));
  }
  out.latents = concat_rows(latents);
  out.t5 = concat_rows(t5);
  out.clip = concat_rows(clip);
  return out;
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
  const TextEncodings empty = encoders.encode_captions({""});
  dataset.empty_t5 = empty.t5.narrow(0, 0, 1).view({empty.t5.size(1), empty.t5.size(2)}).contiguous();
  dataset.empty_clip = empty.clip.narrow(0, 0, 1).view({empty.clip.size(1)}).contiguous();
  write_flux_dataset(options.output, dataset);
  if (options.log) {
    options.log(fmt::format("wrote {}: {} training and {} validation examples of {}x{} images (encoders {})",
                            options.output, dataset.train.size(), dataset.validation.size(), img_size, img_size,
                            dataset.encoders_fingerprint));
  }
}

}  // namespace titan::train::flux
