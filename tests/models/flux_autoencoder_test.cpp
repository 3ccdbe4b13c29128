// FLUX.1's autoencoder (models/flux/flux_autoencoder.h) against the float64
// plain-PyTorch autoencoder of tests/reference/flux_autoencoder.py with the
// same weights, loaded from a tiny ae.safetensors: the encoder's moments and
// the scaled latent, and the image decoded from a latent, in f32 and bf16;
// sampling as mean + std * noise; the parameter names and count of FLUX.1's
// own configuration; files with a missing, unknown or mis-shaped tensor, bad
// inputs and gradient mode refused by name.
//
// f32 tolerance: the op tests' (2e-5 of the output's scale, tests/support/
// reference.h). The tiny model chains 11 (encoder) and 13 (decoder) convs with
// a group norm before most, each of them one f32 sum of at most 145 terms;
// the largest error measured is 1.3e-6 of the scale, 15x inside.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/flux/flux_autoencoder.h"
#include "titan/ops/random.h"

namespace titan {
namespace flux_autoencoder_test {

using models::flux::AutoEncoder;
using models::flux::AutoEncoderConfig;

// tests/reference/flux_autoencoder.py's TINY.
AutoEncoderConfig tiny() {
  AutoEncoderConfig config;
  config.resolution = 16;
  config.ch = 8;
  config.ch_mult = {1, 2, 2};
  config.num_res_blocks = 1;
  config.z_channels = 4;
  config.num_groups = 4;
  return config;
}

const testing::ReferenceCase& reference() {
  static const testing::ReferenceCase ref("flux_ae_tiny");
  return ref;
}

std::string weights_file() { return testing::reference_dir() + "/flux_ae_tiny_weights.safetensors"; }

std::shared_ptr<AutoEncoder> with_reference_weights() {
  auto model = std::make_shared<AutoEncoder>(tiny());
  models::flux::load_autoencoder(*model, weights_file());
  return model;
}

void expect_f32_match(const Tensor& actual, const Tensor& expected) {
  testing::expect_matches_reference(actual, expected, DType::f32);
}

TEST(FluxAutoencoder, EncoderMatchesTheReferenceInF32) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  {
    const autograd::NoGradGuard frozen;
    expect_f32_match(model->encoder->forward(ref.get("image")), ref.get("moments"));
  }
  const Tensor latent = model->encode(ref.get("image"));
  EXPECT_EQ(latent.shape(), (Shape{2, 4, 4, 3}));
  expect_f32_match(latent, ref.get("latent"));
}

TEST(FluxAutoencoder, DecoderMatchesTheReferenceInF32) {
  const testing::ReferenceCase& ref = reference();
  const Tensor image = with_reference_weights()->decode(ref.get("decoder_input"));
  EXPECT_EQ(image.shape(), (Shape{2, 3, 16, 12}));
  expect_f32_match(image, ref.get("decoded"));
}

// bf16 weights and activations through 11 and 13 convs, each output rounded
// to 8 bits: measured 1.3% (latent) and 1.8% (image) of the norm on every
// kernel set, under a bound of 3% (T5's); a wrong term moves them by its own
// size, and the f32 tests above hold the maths to 2e-5.
TEST(FluxAutoencoder, TracksTheReferenceInBf16) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  model->to(DType::bf16);
  const Tensor latent = model->encode(ref.get("image", DType::bf16));
  EXPECT_EQ(latent.dtype(), DType::bf16);
  EXPECT_LT(testing::relative_l2_error(latent.to(DType::f32), ref.get("latent")), 3e-2);
  const Tensor image = model->decode(ref.get("decoder_input", DType::bf16));
  EXPECT_EQ(image.dtype(), DType::bf16);
  EXPECT_LT(testing::relative_l2_error(image.to(DType::f32), ref.get("decoded")), 3e-2);
}

// A sample is scale * (mean + exp(logvar / 2) * noise - shift), the noise one
// f32 normal_ draw from the generator; the reference's moments give mean and logvar.
TEST(FluxAutoencoder, SamplingAddsTheGaussiansNoise) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  Generator generator(5);
  const Tensor sample = model->encode(ref.get("image"), generator);
  Generator same(5);
  Tensor noise = Tensor::empty({2, 4, 4, 3});
  ops::normal_(noise, 0.0, 1.0, same);
  const std::vector<float> moments = ref.get("moments").to_floats(), n = noise.to_floats();
  const AutoEncoderConfig c = tiny();
  std::vector<float> expected;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 4 * 4 * 3; ++i) {
      const size_t at = static_cast<size_t>(b * 8 * 12 + i), lv = at + 4 * 12;
      const double z = moments[at] + std::exp(0.5 * moments[lv]) * n[static_cast<size_t>(b * 48 + i)];
      expected.push_back(static_cast<float>(c.scale_factor * (z - c.shift_factor)));
    }
  }
  expect_f32_match(sample, Tensor::from_floats(expected, {2, 4, 4, 3}));
  // The noise is drawn: another seed, another sample.
  Generator other(6);
  EXPECT_GT(testing::relative_l2_error(model->encode(ref.get("image"), other), sample), 1e-2);
}

// FLUX.1's own configuration, built on the meta device: ae.safetensors' names
// and its 244 tensors of 83,819,683 numbers (counted from
// tests/reference/flux_autoencoder.py built at this configuration).
TEST(FluxAutoencoder, Flux1ConfigurationHasAeSafetensorsNames) {
  AutoEncoder model(AutoEncoderConfig{}, Device::meta());
  std::set<std::string> names;
  for (const auto& [name, parameter] : model.named_parameters()) names.insert(name);
  EXPECT_EQ(names.size(), 244u);
  EXPECT_EQ(model.num_parameters(), 83819683);
  for (const char* name :
       {"encoder.conv_in.weight", "encoder.down.0.block.0.norm1.weight", "encoder.down.0.downsample.conv.weight",
        "encoder.down.1.block.0.nin_shortcut.weight", "encoder.mid.attn_1.q.weight", "encoder.mid.attn_1.proj_out.bias",
        "encoder.conv_out.weight", "decoder.up.3.upsample.conv.weight", "decoder.up.0.block.2.conv2.bias",
        "decoder.up.0.block.0.nin_shortcut.weight", "decoder.mid.block_2.norm2.bias", "decoder.norm_out.weight"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  EXPECT_EQ(names.count("encoder.down.3.downsample.conv.weight"), 0u);  // the last level keeps its size
  EXPECT_EQ(names.count("decoder.up.0.upsample.conv.weight"), 0u);
  EXPECT_EQ(model.config.downsampling(), 8);
}

std::string written(const std::string& name, const checkpoint::NamedTensors& tensors) {
  const std::string path = ::testing::TempDir() + "/" + name + ".safetensors";
  checkpoint::write_safetensors(path, tensors);
  return path;
}

TEST(FluxAutoencoder, LoadRefusesMissingUnknownAndMisshapedTensorsByName) {
  const checkpoint::SafetensorsReader reader(weights_file());
  checkpoint::NamedTensors all;
  for (const checkpoint::SafetensorsEntry& entry : reader.header().entries)
    all.emplace_back(entry.name, reader.read(entry.name));
  AutoEncoder model(tiny());

  checkpoint::NamedTensors missing;
  for (const auto& item : all)
    if (item.first != "decoder.up.2.upsample.conv.bias") missing.push_back(item);
  const std::string missing_path = written("ae_missing", missing);
  testing::expect_error([&] { models::flux::load_autoencoder(model, missing_path); },
                        {missing_path, "decoder.up.2.upsample.conv.bias", "missing"});

  checkpoint::NamedTensors unknown = all;
  unknown.emplace_back("encoder.down.2.downsample.conv.weight", Tensor::zeros({16, 16, 3, 3}));
  const std::string unknown_path = written("ae_unknown", unknown);
  testing::expect_error([&] { models::flux::load_autoencoder(model, unknown_path); },
                        {unknown_path, "encoder.down.2.downsample.conv.weight", "not one of"});

  checkpoint::NamedTensors misshaped = all;
  for (auto& item : misshaped)
    if (item.first == "encoder.mid.attn_1.k.weight") item.second = Tensor::zeros({16, 16});
  const std::string misshaped_path = written("ae_misshaped", misshaped);
  testing::expect_error([&] { models::flux::load_autoencoder(model, misshaped_path); },
                        {misshaped_path, "encoder.mid.attn_1.k.weight", "[16, 16]", "[16, 16, 1, 1]"});
}

TEST(FluxAutoencoder, BadInputsAndConfigsAreRefused) {
  const auto model = with_reference_weights();
  testing::expect_error([&] { model->encode(Tensor::zeros({1, 4, 16, 12})); }, {"autoencoder", "[B, 3, H, W]"});
  testing::expect_error([&] { model->encode(Tensor::zeros({1, 3, 16, 10})); }, {"autoencoder", "multiples of 4"});
  testing::expect_error(
      [&] {
        model->encode(Tensor::zeros({1, 3, 16, 12}, DType::bf16));
      },
      {"autoencoder", "bf16", "f32"});
  testing::expect_error([&] { model->decode(Tensor::zeros({1, 3, 4, 3})); }, {"autoencoder", "[B, 4, h, w]"});
  AutoEncoderConfig odd = tiny();
  odd.num_groups = 3;
  testing::expect_error([&] { AutoEncoder{odd}; }, {"autoencoder", "3"});
}

// The convolutions and group norms have no backward: with grad mode on and a
// parameter requiring grad (every module parameter does) they refuse rather
// than return a result gradients would silently miss.
TEST(FluxAutoencoder, ForwardOnlyLayersRefuseGradMode) {
  const auto conv = nn::Conv2dConfig{.in_channels = 3, .out_channels = 2, .kernel_size = 3, .padding = 1}.build();
  const auto norm = nn::GroupNormConfig{.num_groups = 1, .num_channels = 3}.build();
  const Tensor x = Tensor::zeros({1, 3, 4, 4});
  testing::expect_error([&] { conv->forward(x); }, {"F::conv2d", "forward only"});
  testing::expect_error([&] { norm->forward(x); }, {"F::group_norm", "forward only"});
  const autograd::NoGradGuard frozen;
  EXPECT_EQ(conv->forward(x).shape(), (Shape{1, 2, 4, 4}));
  EXPECT_EQ(norm->forward(x).shape(), (Shape{1, 3, 4, 4}));
}

}  // namespace flux_autoencoder_test
}  // namespace titan
