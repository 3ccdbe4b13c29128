// FLUX.1's autoencoder (Black Forest Labs' ae.safetensors; TorchTitan's
// flux/model/autoencoder.py), inference only: a convolutional encoder from
// images in [-1, 1] to the 16-channel latents the transformer models, at an
// eighth of the image's height and width, and the decoder back. Parameters
// carry ae.safetensors' names ("encoder.down.0.block.0.norm1.weight",
// "decoder.up.3.upsample.conv.weight"), so that file loads as it is.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "titan/core/generator.h"
#include "titan/nn/conv2d.h"
#include "titan/nn/group_norm.h"
#include "titan/nn/module.h"
#include "titan/nn/module_dict.h"

namespace titan::models::flux {

// BFL's AutoEncoderParams; the defaults are FLUX.1's (schnell and dev share the autoencoder).
struct AutoEncoderConfig {
  // Kept for parity with BFL's config, where it only labels sizes: any image
  // whose sides are multiples of downsampling() is accepted.
  int64_t resolution = 256;
  int64_t in_channels = 3;
  int64_t ch = 128;
  int64_t out_ch = 3;
  std::vector<int64_t> ch_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  int64_t z_channels = 16;
  // latent = scale_factor * (z - shift_factor), which brings FLUX.1's latents
  // near zero mean and unit variance.
  double scale_factor = 0.3611;
  double shift_factor = 0.1159;
  // Groups of every group norm (32 in FLUX.1; not a field of BFL's, so that
  // tiny test models can have fewer channels).
  int64_t num_groups = 32;
  void validate() const;
  // 2^(levels - 1): how many image pixels a latent cell spans per side (8).
  int64_t downsampling() const;
};

// Each group norm's epsilon (BFL's).
inline constexpr double kAutoEncoderNormEps = 1e-6;

// norm1, SiLU, 3x3 conv1, norm2, SiLU, 3x3 conv2, added to the input (through
// a 1x1 nin_shortcut when the channel count changes).
class AeResnetBlock : public nn::Module {
 public:
  AeResnetBlock(int64_t in_channels, int64_t out_channels, int64_t groups, Device device);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::GroupNorm> norm1, norm2;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Conv2d> nin_shortcut;  // null when in == out
};

// Single-head self-attention over the H*W positions, with the channels as the
// head: q, k, v and proj_out are 1x1 convs, the scores scaled by 1/sqrt(C);
// x + proj_out(attention(norm(x))). On CUDA the attention is two GEMMs and
// an f32 softmax over blocks of queries (FLUX.1's C = 512 is wider than the
// CUDA flash kernels' head dims); elsewhere the flash kernel.
class AeAttnBlock : public nn::Module {
 public:
  AeAttnBlock(int64_t channels, int64_t groups, Device device);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::GroupNorm> norm;
  std::shared_ptr<nn::Conv2d> q, k, v, proj_out;
};

// Halves height and width: zero padding on the bottom and right only, then a
// 3x3 stride-2 conv (BFL's Downsample: torch's conv pads symmetrically).
class AeDownsample : public nn::Module {
 public:
  AeDownsample(int64_t channels, Device device);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Conv2d> conv;
};

// Doubles height and width: nearest-neighbour repetition, then a 3x3 conv.
class AeUpsample : public nn::Module {
 public:
  AeUpsample(int64_t channels, Device device);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Conv2d> conv;
};

// x [B, C, H, W] -> [B, C, 2H, 2W], each value repeated in a 2x2 square
// (torch's interpolate(scale_factor=2, mode="nearest")).
Tensor upsample_nearest_2x(const Tensor& x);

// The middle of both halves: block_1, attn_1, block_2 at the lowest resolution.
class AeMiddle : public nn::Module {
 public:
  AeMiddle(int64_t channels, int64_t groups, Device device);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<AeResnetBlock> block_1, block_2;
  std::shared_ptr<AeAttnBlock> attn_1;
};

// One resolution level: its resnet blocks ("block.<i>"), then a downsample
// (encoder) or an upsample (decoder) unless it is the last one applied.
class AeLevel : public nn::Module {
 public:
  enum class Resample { none, down, up };
  AeLevel(int64_t in_channels, int64_t out_channels, int64_t blocks, int64_t groups, Resample resample, Device device);
  Tensor forward(const Tensor& x) const;
  std::vector<std::shared_ptr<AeResnetBlock>> blocks;
  std::shared_ptr<AeDownsample> downsample;  // null unless Resample::down
  std::shared_ptr<AeUpsample> upsample;      // null unless Resample::up
};

// BFL's Encoder: image [B, in_channels, H, W] -> the Gaussian's moments
// [B, 2 z_channels, H / d, W / d] (the mean's channels, then the log-variance's).
class AeEncoder : public nn::Module {
 public:
  AeEncoder(const AutoEncoderConfig& config, Device device);
  Tensor forward(const Tensor& image) const;
  std::shared_ptr<nn::Conv2d> conv_in, conv_out;
  std::vector<std::shared_ptr<AeLevel>> down;
  std::shared_ptr<AeMiddle> mid;
  std::shared_ptr<nn::GroupNorm> norm_out;
};

// BFL's Decoder: an unscaled latent [B, z_channels, h, w] -> image [B, out_ch, h d, w d].
// Its levels are named from the highest resolution ("up.0") but run from the lowest.
class AeDecoder : public nn::Module {
 public:
  AeDecoder(const AutoEncoderConfig& config, Device device);
  Tensor forward(const Tensor& z) const;
  std::shared_ptr<nn::Conv2d> conv_in, conv_out;
  std::shared_ptr<AeMiddle> mid;
  std::vector<std::shared_ptr<AeLevel>> up;  // up[0]: the highest resolution
  std::shared_ptr<nn::GroupNorm> norm_out;
};

// Images in the weights' compute dtype (after model.to(DType::bf16), bf16
// images): a mismatch is refused rather than cast here.
class AutoEncoder : public nn::Module {
 public:
  explicit AutoEncoder(const AutoEncoderConfig& config, Device device = Device::cpu());
  // image [B, in_channels, H, W] in [-1, 1], H and W multiples of
  // downsampling() -> latent [B, z_channels, H / d, W / d]: the encoder's
  // Gaussian mean, deterministic, scaled as scale * (mean - shift). BFL and
  // TorchTitan sample by default; the mean is what a reproducible pipeline
  // (latents prepared once, compared across runs) and the tests need.
  Tensor encode(const Tensor& image) const;
  // The same with a sample of the Gaussian, mean + exp(logvar / 2) * noise,
  // the noise N(0, 1) drawn from `generator` (one f32 normal_ over the
  // latent's shape), as BFL's DiagonalGaussian samples. Computed on the host.
  Tensor encode(const Tensor& image, Generator& generator) const;
  // latent [B, z_channels, h, w] -> image [B, out_ch, h d, w d] (about [-1, 1]),
  // the scaling undone first: decoder(latent / scale + shift).
  Tensor decode(const Tensor& latent) const;

  const AutoEncoderConfig config;
  std::shared_ptr<AeEncoder> encoder;
  std::shared_ptr<AeDecoder> decoder;

 private:
  Tensor moments(const Tensor& image) const;
};

// Loads BFL's ae.safetensors (or any file of the same names) into `model`:
// every tensor of the file must be one of the model's, with its shape, and
// every one of the model's must be in the file; the error names the file and
// the tensor. Values are cast to the parameters' dtype.
void load_autoencoder(AutoEncoder& model, const std::string& path);

}  // namespace titan::models::flux
