#include "titan/models/flux/block_mean_autoencoder.h"

#include "titan/core/error.h"

namespace titan::models::flux {

Tensor block_mean_encode(const Tensor& images) {
  TITAN_CHECK(images.dim() == 4 && images.size(1) == 3 && images.size(2) % 8 == 0 && images.size(3) % 8 == 0,
              "block-mean autoencoder: images must be [B, 3, H, W] with H and W multiples of 8 (got {})",
              shape_str(images.shape()));
  const int64_t b = images.size(0), h = images.size(2) / 8, w = images.size(3) / 8;
  // [B, 3, h, 2, 4, w, 2, 4]: block row, quarter row, pixel row; the same for columns.
  const Tensor blocks = images.to(DType::f32).contiguous().view({b, 3, h, 2, 4, w, 2, 4});
  // Mean over each quarter's 4x4 pixels, then (colour, quarter row, quarter column) as channels.
  const Tensor quarters = blocks.permute({0, 1, 3, 6, 2, 5, 4, 7}).contiguous().view({b, 12, h, w, 16});
  const std::vector<float> values = quarters.to_floats();
  std::vector<float> means(static_cast<size_t>(b * 12 * h * w));
  for (size_t i = 0; i < means.size(); ++i) {
    // Pairwise sums: 16 equal values sum exactly, so a quarter-constant image encodes to its colours.
    float partial[16];
    for (size_t j = 0; j < 16; ++j) partial[j] = values[i * 16 + j];
    for (size_t width = 8; width >= 1; width /= 2) {
      for (size_t j = 0; j < width; ++j) partial[j] = partial[2 * j] + partial[2 * j + 1];
    }
    means[i] = partial[0] / 16.0f;
  }
  return Tensor::from_floats(means, {b, 12, h, w});
}

Tensor block_mean_decode(const Tensor& latents) {
  TITAN_CHECK(latents.dim() == 4 && latents.size(1) == kBlockMeanChannels,
              "block-mean autoencoder: latents must be [B, 12, h, w] (got {})", shape_str(latents.shape()));
  const int64_t b = latents.size(0), h = latents.size(2), w = latents.size(3);
  // [B, 3, 2, 2, h, w] -> each quarter repeated over its 4x4 pixels -> [B, 3, h, 2, 4, w, 2, 4].
  const Tensor quarters = latents.to(DType::f32).contiguous().view({b, 3, 2, 2, h, w, 1, 1});
  const Tensor painted = quarters.expand({b, 3, 2, 2, h, w, 4, 4}).permute({0, 1, 4, 2, 6, 5, 3, 7}).contiguous();
  return painted.view({b, 3, 8 * h, 8 * w});
}

}  // namespace titan::models::flux
