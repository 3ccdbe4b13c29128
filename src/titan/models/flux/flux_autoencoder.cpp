#include "titan/models/flux/flux_autoencoder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/error.h"
#include "titan/nn/functional.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"
#include "titan/ops/softmax.h"

namespace titan::models::flux {

void AutoEncoderConfig::validate() const {
  TITAN_CHECK(resolution > 0 && in_channels > 0 && ch > 0 && out_ch > 0 && num_res_blocks > 0 && z_channels > 0,
              "flux autoencoder: resolution, in_channels, ch, out_ch, num_res_blocks and z_channels must be positive");
  TITAN_CHECK(!ch_mult.empty(), "flux autoencoder: ch_mult must name at least one level");
  TITAN_CHECK(num_groups > 0, "flux autoencoder: num_groups must be positive (got {})", num_groups);
  for (const int64_t mult : ch_mult) {
    TITAN_CHECK(mult > 0, "flux autoencoder: ch_mult entries must be positive (got {})", mult);
    TITAN_CHECK(ch * mult % num_groups == 0, "flux autoencoder: ch {} x ch_mult {} = {} channels do not split into {}",
                ch, mult, ch * mult, num_groups);
  }
  TITAN_CHECK(std::isfinite(scale_factor) && scale_factor != 0.0 && std::isfinite(shift_factor),
              "flux autoencoder: scale_factor {} must be finite and non-zero, shift_factor {} finite", scale_factor,
              shift_factor);
}

int64_t AutoEncoderConfig::downsampling() const { return int64_t{1} << (ch_mult.size() - 1); }

namespace {

std::shared_ptr<nn::GroupNorm> ae_norm(int64_t channels, int64_t groups, Device device) {
  return nn::GroupNormConfig{.num_groups = groups, .num_channels = channels, .eps = kAutoEncoderNormEps}.build(device);
}

std::shared_ptr<nn::Conv2d> ae_conv(int64_t in, int64_t out, int64_t kernel, Device device, int64_t stride = 1) {
  // A 3x3 conv pads by 1 (same size) except the downsampler's, which pads itself.
  const int64_t padding = kernel == 3 && stride == 1 ? 1 : 0;
  return nn::Conv2dConfig{
      .in_channels = in, .out_channels = out, .kernel_size = kernel, .stride = stride, .padding = padding, .bias = true}
      .build(device);
}

AutoEncoderConfig validated(const AutoEncoderConfig& config) {
  config.validate();
  return config;
}

// A 1x1 conv's weight [C, C, 1, 1] as a linear layer's [C, C].
Tensor as_linear_weight(const nn::Conv2d& conv) {
  const Tensor w = conv.weight->materialize();
  return F::view(w, {w.size(0), w.size(1)});
}

// Score elements per block of queries in attention_by_gemms: 256 MiB of f32.
constexpr int64_t kAttentionScoreElements = int64_t{1} << 26;

// softmax(scale q k^T) v for q, k, v [B, N, C], on CUDA: the mid block's
// single head is C = 512 wide in FLUX.1, past the CUDA flash-attention
// kernels' head dims (ops/cuda/attention.cuh: at most 128). So it runs as two
// GEMMs and a softmax, the scores in f32 (as a fused kernel keeps them) and
// the probabilities rounded to q's dtype for the second GEMM (as a fused
// kernel's bf16 path does), a block of queries at a time to bound the
// [B, queries, N] score scratch (N = 16384 for a 1024 x 1024 image). Inference
// only: no autograd graph.
Tensor attention_by_gemms(const Tensor& q, const Tensor& k, const Tensor& v, float scale) {
  const int64_t batch = q.size(0), n = q.size(1), c = q.size(2);
  const int64_t block = std::clamp<int64_t>(kAttentionScoreElements / (batch * n), 1, n);
  Tensor out = Tensor::empty({batch, n, c}, q.dtype(), q.device());
  const Tensor keys = k.transpose(1, 2);
  for (int64_t first = 0; first < n; first += block) {
    const int64_t rows = std::min(block, n - first);
    const Tensor scores = Tensor::empty({batch, rows, n}, DType::f32, q.device());
    ops::gemm(q.narrow(1, first, rows), keys, scores, scale);
    ops::gemm(ops::softmax(scores).to(q.dtype()), v, out.narrow(1, first, rows));
  }
  return out;
}

}  // namespace

AeResnetBlock::AeResnetBlock(int64_t in_channels, int64_t out_channels, int64_t groups, Device device)
    : norm1(register_module("norm1", ae_norm(in_channels, groups, device))),
      norm2(register_module("norm2", ae_norm(out_channels, groups, device))),
      conv1(register_module("conv1", ae_conv(in_channels, out_channels, 3, device))),
      conv2(register_module("conv2", ae_conv(out_channels, out_channels, 3, device))),
      nin_shortcut(in_channels == out_channels
                       ? nullptr
                       : register_module("nin_shortcut", ae_conv(in_channels, out_channels, 1, device))) {}

Tensor AeResnetBlock::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  const Tensor h = conv1->forward(F::silu(norm1->forward(x)));
  const Tensor out = conv2->forward(F::silu(norm2->forward(h)));
  return F::add(nin_shortcut ? nin_shortcut->forward(x) : x, out);
}

AeAttnBlock::AeAttnBlock(int64_t channels, int64_t groups, Device device)
    : norm(register_module("norm", ae_norm(channels, groups, device))),
      q(register_module("q", ae_conv(channels, channels, 1, device))),
      k(register_module("k", ae_conv(channels, channels, 1, device))),
      v(register_module("v", ae_conv(channels, channels, 1, device))),
      proj_out(register_module("proj_out", ae_conv(channels, channels, 1, device))) {}

Tensor AeAttnBlock::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  // The 1x1 convs run as linear layers on [B, H*W, C] rows: one transpose in
  // and one out instead of one per projection.
  const Tensor rows = F::view(F::contiguous(F::permute(norm->forward(x), {0, 2, 3, 1})), {b, h * w, c});
  const auto project = [&](const nn::Conv2d& conv) {
    return F::view(F::linear(rows, as_linear_weight(conv), conv.bias->materialize()), {b, h * w, 1, c});
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(c));
  const auto flat = [&](const Tensor& t) { return F::view(t, {b, h * w, c}); };
  const Tensor attended =
      x.device().is_cuda()
          ? attention_by_gemms(flat(project(*q)), flat(project(*k)), flat(project(*v)), scale)
          : F::scaled_dot_product_attention(project(*q), project(*k), project(*v), ops::AttentionMask(false), scale);
  const Tensor out =
      F::linear(F::view(attended, {b, h * w, c}), as_linear_weight(*proj_out), proj_out->bias->materialize());
  return F::add(x, F::contiguous(F::permute(F::view(out, {b, h, w, c}), {0, 3, 1, 2})));
}

AeDownsample::AeDownsample(int64_t channels, Device device)
    : conv(register_module("conv", ae_conv(channels, channels, 3, device, 2))) {}

Tensor AeDownsample::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  return conv->forward(x, ops::Conv2dPadding{.top = 0, .bottom = 1, .left = 0, .right = 1});
}

Tensor upsample_nearest_2x(const Tensor& x) {
  TITAN_CHECK(x.dim() == 4, "upsample_nearest_2x: x is {}, expected [B, C, H, W]", shape_str(x.shape()));
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const Tensor spread = F::expand(F::view(F::contiguous(x), {b, c, h, 1, w, 1}), {b, c, h, 2, w, 2});
  return F::view(F::contiguous(spread), {b, c, 2 * h, 2 * w});
}

AeUpsample::AeUpsample(int64_t channels, Device device)
    : conv(register_module("conv", ae_conv(channels, channels, 3, device))) {}

Tensor AeUpsample::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  return conv->forward(upsample_nearest_2x(x));
}

AeMiddle::AeMiddle(int64_t channels, int64_t groups, Device device)
    : block_1(register_module("block_1", std::make_shared<AeResnetBlock>(channels, channels, groups, device))),
      block_2(register_module("block_2", std::make_shared<AeResnetBlock>(channels, channels, groups, device))),
      attn_1(register_module("attn_1", std::make_shared<AeAttnBlock>(channels, groups, device))) {}

Tensor AeMiddle::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  return block_2->forward(attn_1->forward(block_1->forward(x)));
}

AeLevel::AeLevel(int64_t in_channels, int64_t out_channels, int64_t blocks_in_level, int64_t groups, Resample resample,
                 Device device)
    : downsample(resample == Resample::down
                     ? register_module("downsample", std::make_shared<AeDownsample>(out_channels, device))
                     : nullptr),
      upsample(resample == Resample::up
                   ? register_module("upsample", std::make_shared<AeUpsample>(out_channels, device))
                   : nullptr) {
  auto list = register_module("block", std::make_shared<nn::ModuleDict<AeResnetBlock>>());
  for (int64_t i = 0; i < blocks_in_level; ++i) {
    blocks.push_back(
        std::make_shared<AeResnetBlock>(i == 0 ? in_channels : out_channels, out_channels, groups, device));
    list->insert(std::to_string(i), blocks.back());
  }
}

Tensor AeLevel::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  Tensor h = x;
  for (const auto& block : blocks) h = block->forward(h);
  if (downsample) h = downsample->forward(h);
  if (upsample) h = upsample->forward(h);
  return h;
}

AeEncoder::AeEncoder(const AutoEncoderConfig& config, Device device) {
  const int64_t levels = static_cast<int64_t>(config.ch_mult.size()), groups = config.num_groups;
  conv_in = register_module("conv_in", ae_conv(config.in_channels, config.ch, 3, device));
  auto list = register_module("down", std::make_shared<nn::ModuleDict<AeLevel>>());
  int64_t channels = config.ch;
  for (int64_t i = 0; i < levels; ++i) {
    const int64_t out = config.ch * config.ch_mult[static_cast<size_t>(i)];
    down.push_back(std::make_shared<AeLevel>(channels, out, config.num_res_blocks, groups,
                                             i + 1 < levels ? AeLevel::Resample::down : AeLevel::Resample::none,
                                             device));
    list->insert(std::to_string(i), down.back());
    channels = out;
  }
  mid = register_module("mid", std::make_shared<AeMiddle>(channels, groups, device));
  norm_out = register_module("norm_out", ae_norm(channels, groups, device));
  conv_out = register_module("conv_out", ae_conv(channels, 2 * config.z_channels, 3, device));
}

Tensor AeEncoder::forward(const Tensor& image) const {
  const ForwardScope scope(*this);
  Tensor h = conv_in->forward(image);
  for (const auto& level : down) h = level->forward(h);
  return conv_out->forward(F::silu(norm_out->forward(mid->forward(h))));
}

AeDecoder::AeDecoder(const AutoEncoderConfig& config, Device device) {
  const int64_t levels = static_cast<int64_t>(config.ch_mult.size()), groups = config.num_groups;
  const auto width = [&](int64_t level) { return config.ch * config.ch_mult[static_cast<size_t>(level)]; };
  conv_in = register_module("conv_in", ae_conv(config.z_channels, width(levels - 1), 3, device));
  mid = register_module("mid", std::make_shared<AeMiddle>(width(levels - 1), groups, device));
  auto list = register_module("up", std::make_shared<nn::ModuleDict<AeLevel>>());
  for (int64_t i = 0; i < levels; ++i) {
    // Run from the top level down, level i takes what level i + 1 made.
    const int64_t in = i + 1 < levels ? width(i + 1) : width(levels - 1);
    up.push_back(std::make_shared<AeLevel>(in, width(i), config.num_res_blocks + 1, groups,
                                           i > 0 ? AeLevel::Resample::up : AeLevel::Resample::none, device));
    list->insert(std::to_string(i), up.back());
  }
  norm_out = register_module("norm_out", ae_norm(width(0), groups, device));
  conv_out = register_module("conv_out", ae_conv(width(0), config.out_ch, 3, device));
}

Tensor AeDecoder::forward(const Tensor& z) const {
  const ForwardScope scope(*this);
  Tensor h = mid->forward(conv_in->forward(z));
  for (auto level = up.rbegin(); level != up.rend(); ++level) h = (*level)->forward(h);
  return conv_out->forward(F::silu(norm_out->forward(h)));
}

AutoEncoder::AutoEncoder(const AutoEncoderConfig& config_in, Device device)
    : config(validated(config_in)),
      encoder(register_module("encoder", std::make_shared<AeEncoder>(config, device))),
      decoder(register_module("decoder", std::make_shared<AeDecoder>(config, device))) {
  name_modules();
}

Tensor AutoEncoder::moments(const Tensor& image) const {
  TITAN_CHECK(image.defined() && image.dim() == 4 && image.size(1) == config.in_channels,
              "flux autoencoder: the image must be [B, {}, H, W] (got {})", config.in_channels,
              image.defined() ? shape_str(image.shape()) : "nothing");
  const int64_t d = config.downsampling();
  TITAN_CHECK(image.size(2) > 0 && image.size(3) > 0 && image.size(2) % d == 0 && image.size(3) % d == 0,
              "flux autoencoder: the image's height and width ({} x {}) must be positive multiples of {}",
              image.size(2), image.size(3), d);
  const DType weights = encoder->conv_in->weight->materialize().dtype();
  TITAN_CHECK(image.dtype() == weights, "flux autoencoder: the image is {} but the weights compute in {}",
              dtype_name(image.dtype()), dtype_name(weights));
  return encoder->forward(image);
}

namespace {

// scale * (z - shift), in z's dtype.
Tensor scaled_latent(const Tensor& z, const AutoEncoderConfig& config) {
  const Tensor shift = Tensor::full(z.shape(), -config.shift_factor, z.dtype(), z.device());
  return F::scale(F::add(z, shift), static_cast<float>(config.scale_factor));
}

}  // namespace

Tensor AutoEncoder::encode(const Tensor& image) const {
  const ForwardScope scope(*this);
  const autograd::NoGradGuard frozen;
  const Tensor mean = F::contiguous(F::narrow(moments(image), 1, 0, config.z_channels));
  return scaled_latent(mean, config);
}

Tensor AutoEncoder::encode(const Tensor& image, Generator& generator) const {
  const ForwardScope scope(*this);
  const autograd::NoGradGuard frozen;
  const Tensor both = moments(image);
  const Tensor mean = F::contiguous(F::narrow(both, 1, 0, config.z_channels));
  const Tensor logvar = F::contiguous(F::narrow(both, 1, config.z_channels, config.z_channels));
  Tensor noise = Tensor::empty(mean.shape(), DType::f32, Device::cpu());
  ops::normal_(noise, 0.0, 1.0, generator);
  // On the host: titan has no exp op, and a latent is small beside the image
  // the encoder just read.
  const std::vector<float> m = mean.to_floats(), lv = logvar.to_floats(), n = noise.to_floats();
  std::vector<float> sample(m.size());
  for (size_t i = 0; i < m.size(); ++i) sample[i] = m[i] + std::exp(0.5f * lv[i]) * n[i];
  const Tensor z = Tensor::from_floats(sample, mean.shape(), mean.dtype()).to(mean.device());
  return scaled_latent(z, config);
}

Tensor AutoEncoder::decode(const Tensor& latent) const {
  const ForwardScope scope(*this);
  const autograd::NoGradGuard frozen;
  TITAN_CHECK(latent.defined() && latent.dim() == 4 && latent.size(1) == config.z_channels && latent.size(2) > 0 &&
                  latent.size(3) > 0,
              "flux autoencoder: the latent must be [B, {}, h, w] (got {})", config.z_channels,
              latent.defined() ? shape_str(latent.shape()) : "nothing");
  const DType weights = decoder->conv_in->weight->materialize().dtype();
  TITAN_CHECK(latent.dtype() == weights, "flux autoencoder: the latent is {} but the weights compute in {}",
              dtype_name(latent.dtype()), dtype_name(weights));
  const Tensor shift = Tensor::full(latent.shape(), config.shift_factor, latent.dtype(), latent.device());
  return decoder->forward(F::add(F::scale(latent, static_cast<float>(1.0 / config.scale_factor)), shift));
}

void load_autoencoder(AutoEncoder& model, const std::string& path) {
  const checkpoint::SafetensorsReader reader(path);
  std::map<std::string, Shape> expected;
  for (const auto& [name, parameter] : model.named_parameters()) expected[name] = parameter->data.shape();
  std::map<std::string, Tensor> state;
  for (const checkpoint::SafetensorsEntry& entry : reader.header().entries) {
    const auto found = expected.find(entry.name);
    TITAN_CHECK(found != expected.end(), "{}: tensor '{}' is not one of the FLUX autoencoder's (this config has {})",
                path, entry.name, expected.size());
    const Shape shape(entry.shape.begin(), entry.shape.end());
    TITAN_CHECK(shape == found->second, "{}: tensor '{}' is {}, the model's is {}", path, entry.name, shape_str(shape),
                shape_str(found->second));
    state[entry.name] = reader.read(entry.name);
  }
  for (const auto& [name, shape] : expected) {
    TITAN_CHECK(state.count(name) != 0, "{}: the FLUX autoencoder's tensor '{}' {} is missing", path, name,
                shape_str(shape));
  }
  model.load_state_dict(state);
}

}  // namespace titan::models::flux
