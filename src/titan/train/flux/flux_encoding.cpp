#include "titan/train/flux/flux_encoding.h"

#include <filesystem>

#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/data/image_tensor.h"

namespace titan::train::flux {
namespace {

Tensor stack(const std::vector<Tensor>& parts) {
  Shape shape = parts.front().shape();
  shape.insert(shape.begin(), static_cast<int64_t>(parts.size()));
  Tensor all = Tensor::empty(shape, parts.front().dtype());
  for (size_t i = 0; i < parts.size(); ++i) copy_(all.narrow(0, static_cast<int64_t>(i), 1), parts[i].unsqueeze(0));
  return all;
}

std::vector<data::CaptionedImage> read_captions(const std::string& path, const char* key) {
  TITAN_CHECK(std::filesystem::is_regular_file(path), "{} {}: no such captions file", key, path);
  return data::read_image_captions(path);
}

}  // namespace

FluxExamples encode_examples(const std::vector<data::CaptionedImage>& items, const FluxEncoders& encoders,
                             int64_t img_size, size_t batch, const std::function<void(size_t)>& progress) {
  FluxExamples out;
  if (items.empty()) return out;
  std::vector<Tensor> latents, t5, clip;
  for (size_t start = 0; start < items.size(); start += batch) {
    const size_t end = std::min(items.size(), start + batch);
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
    if (progress) progress(end);
  }
  out.latents = concat_rows(latents);
  out.t5 = concat_rows(t5);
  out.clip = concat_rows(clip);
  return out;
}

TextEncodings empty_prompt(const FluxEncoders& encoders) {
  const TextEncodings empty = encoders.encode_captions({""});
  return {empty.t5.narrow(0, 0, 1).view({empty.t5.size(1), empty.t5.size(2)}).contiguous(),
          empty.clip.narrow(0, 0, 1).view({empty.clip.size(1)}).contiguous()};
}

FluxSplit encoded_on_the_fly(std::vector<data::CaptionedImage> items, std::shared_ptr<const FluxEncoders> encoders,
                             int64_t img_size) {
  FluxSplit split;
  split.size = static_cast<int64_t>(items.size());
  split.captions.reserve(items.size());
  for (const data::CaptionedImage& item : items) split.captions.push_back(item.caption);
  const auto shared = std::make_shared<const std::vector<data::CaptionedImage>>(std::move(items));
  split.batch = [shared, encoders, img_size](const std::vector<int64_t>& indices) {
    std::vector<data::CaptionedImage> drawn;
    drawn.reserve(indices.size());
    for (const int64_t i : indices) drawn.push_back((*shared)[static_cast<size_t>(i)]);
    const FluxExamples examples = encode_examples(drawn, *encoders, img_size, drawn.size());
    return FluxBatch{examples.latents, examples.t5, examples.clip};
  };
  return split;
}

FluxSource on_the_fly_source(const JobConfig& config) {
  const auto encoders = std::make_shared<const FluxEncoders>(config);
  const int64_t img_size = config.training.img_size;
  FluxSource source;
  source.train =
      encoded_on_the_fly(read_captions(config.training.dataset_path, "training.dataset_path"), encoders, img_size);
  if (!config.validation.dataset_path.empty()) {
    source.validation = encoded_on_the_fly(read_captions(config.validation.dataset_path, "validation.dataset_path"),
                                           encoders, img_size);
  }
  const TextEncodings empty = empty_prompt(*encoders);
  source.empty_t5 = empty.t5;
  source.empty_clip = empty.clip;
  return source;
}

}  // namespace titan::train::flux
