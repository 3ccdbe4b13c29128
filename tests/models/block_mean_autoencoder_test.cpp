// The block-mean autoencoder (models/flux/block_mean_autoencoder.h) against
// naive loops over pixels: each latent value is its quarter's mean, decoding
// paints it back, and an image constant on 4x4 quarters makes the round trip exactly.
#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/models/flux/block_mean_autoencoder.h"
#include "titan/ops/random.h"

namespace titan {
namespace block_mean_autoencoder_test {

using models::flux::block_mean_decode;
using models::flux::block_mean_encode;

Tensor uniform(const Shape& shape, uint64_t seed) {
  Generator generator(seed);
  const Tensor t = Tensor::empty(shape);
  ops::uniform_(t, -1.0, 1.0, generator);
  return t;
}

TEST(BlockMeanAutoencoder, EachChannelIsAQuarterMean) {
  const int64_t b = 2, h = 16, w = 24;
  const Tensor images = uniform({b, 3, h, w}, 3);
  const std::vector<float> pixels = images.to_floats();
  const Tensor latents = block_mean_encode(images);
  ASSERT_EQ(latents.shape(), (Shape{b, 12, h / 8, w / 8}));
  const std::vector<float> got = latents.to_floats();
  for (int64_t n = 0; n < b; ++n) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t qy = 0; qy < 2; ++qy) {
        for (int64_t qx = 0; qx < 2; ++qx) {
          for (int64_t y = 0; y < h / 8; ++y) {
            for (int64_t x = 0; x < w / 8; ++x) {
              double sum = 0.0;
              for (int64_t py = 0; py < 4; ++py) {
                for (int64_t px = 0; px < 4; ++px) {
                  sum += pixels[static_cast<size_t>(((n * 3 + c) * h + y * 8 + qy * 4 + py) * w + x * 8 + qx * 4 + px)];
                }
              }
              const int64_t channel = c * 4 + qy * 2 + qx;
              // One f32 sum of 16 values in [-1, 1].
              EXPECT_NEAR(got[static_cast<size_t>(((n * 12 + channel) * (h / 8) + y) * (w / 8) + x)], sum / 16, 1e-6);
            }
          }
        }
      }
    }
  }
}

TEST(BlockMeanAutoencoder, QuarterConstantImagesComeBackExactly) {
  // Latents first: their decoding is constant on quarters, and encodes back to them.
  const Tensor latents = uniform({1, 12, 3, 2}, 5);
  const Tensor images = block_mean_decode(latents);
  ASSERT_EQ(images.shape(), (Shape{1, 3, 24, 16}));
  const std::vector<float> pixels = images.to_floats(), values = latents.to_floats();
  // Pixel (y, x) of colour c shows channel c*4 + quarter row*2 + quarter column of block (y/8, x/8).
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t y = 0; y < 24; ++y) {
      for (int64_t x = 0; x < 16; ++x) {
        const int64_t channel = c * 4 + ((y % 8) / 4) * 2 + (x % 8) / 4;
        EXPECT_EQ(pixels[static_cast<size_t>((c * 24 + y) * 16 + x)],
                  values[static_cast<size_t>((channel * 3 + y / 8) * 2 + x / 8)]);
      }
    }
  }
  EXPECT_EQ(block_mean_encode(images).to_floats(), values);
}

TEST(BlockMeanAutoencoder, RefusesSidesThatAreNotMultiplesOfEight) {
  EXPECT_THROW(block_mean_encode(Tensor::zeros({1, 3, 12, 16})), Error);
  EXPECT_THROW(block_mean_decode(Tensor::zeros({1, 16, 2, 2})), Error);
}

}  // namespace block_mean_autoencoder_test
}  // namespace titan
