// The block-mean autoencoder: a fixed, weightless stand-in for FLUX.1's
// learned one, for the synthetic examples and tests that must decode what a
// model generates into colours and positions without a 335 MB download.
// Each 8x8 pixel block (the learned autoencoder's cell) becomes 12 latent
// channels: the mean colour of each of its four 4x4 quarters, channel-major
// (colour, quarter row, quarter column). Decoding paints each quarter its
// colour, so an image whose colours are constant on 4x4 quarters comes back
// exactly; finer detail is averaged away.
#pragma once

#include "titan/core/tensor.h"

namespace titan::models::flux {

inline constexpr int64_t kBlockMeanChannels = 12;

// [B, 3, H, W] (H, W multiples of 8) -> [B, 12, H / 8, W / 8], f32.
Tensor block_mean_encode(const Tensor& images);
// The inverse on its range: [B, 12, h, w] -> [B, 3, 8 h, 8 w], f32.
Tensor block_mean_decode(const Tensor& latents);

}  // namespace titan::models::flux
