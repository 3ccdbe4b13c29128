#include "titan/train/flux/flux_encoders.h"

#include <fmt/format.h>
#include <filesystem>

#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/data/file_io.h"
#include "titan/data/hashing.h"
#include "titan/data/padded_encoding.h"
#include "titan/data/tokenizer_loader.h"
#include "titan/models/flux/block_mean_autoencoder.h"
#include "titan/models/flux/text_encoder_config_json.h"
#include "titan/models/flux/text_encoder_folder.h"
#include "titan/nn/initialize.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;

// CLIP's context: FLUX tokenizes every prompt to 77 positions.
constexpr size_t kClipTokens = 77;

// Folder `folder` of key `key`, checked to exist.
fs::path encoder_folder(const std::string& folder, const char* key) {
  TITAN_CHECK(!folder.empty(), "encoder.{} is empty: name the encoder's Hugging Face folder", key);
  TITAN_CHECK(fs::is_directory(folder), "encoder.{} {}: not a folder", key, folder);
  return folder;
}

// The part of the fingerprint a folder gives: its config and tokenizer, and
// the names and sizes of its weight files (unless drawn at random).
std::string folder_identity(const fs::path& folder, bool random_init) {
  std::string identity = data::read_file(folder / "config.json", "encoder config") +
                         data::read_file(folder / "tokenizer.json", "encoder tokenizer");
  if (random_init) return identity + "random";
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() == ".safetensors" || entry.path().filename() == "model.safetensors.index.json") {
      files.push_back(fmt::format("{}:{}", entry.path().filename().string(), entry.file_size()));
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) identity += file;
  return identity;
}

void check_autoencoder_keys(const EncoderSection& e) {
  TITAN_CHECK(e.autoencoder == "flux" || e.autoencoder == "block_mean",
              "encoder.autoencoder '{}' is not one of flux, block_mean", e.autoencoder);
  TITAN_CHECK(e.autoencoder == "block_mean" || e.random_init || !e.autoencoder_path.empty(),
              "encoder.autoencoder_path is empty: name FLUX.1's ae.safetensors");
}

// What the autoencoder adds to the fingerprint: which one, and its weights' file (or seed).
std::string autoencoder_identity(const EncoderSection& e, uint64_t seed) {
  check_autoencoder_keys(e);
  std::string identity = "autoencoder=" + e.autoencoder;
  if (e.autoencoder == "block_mean") return identity;
  if (e.random_init) return identity + fmt::format(" random seed {}", seed);
  TITAN_CHECK(fs::is_regular_file(e.autoencoder_path), "encoder.autoencoder_path {}: no such file", e.autoencoder_path);
  return identity +
         fmt::format(" {}:{}", fs::path(e.autoencoder_path).filename().string(), fs::file_size(e.autoencoder_path));
}

// FLUX.1's autoencoder as encoder.* asks (null for block_mean).
std::shared_ptr<models::flux::AutoEncoder> build_autoencoder(const EncoderSection& e, uint64_t seed) {
  check_autoencoder_keys(e);
  if (e.autoencoder == "block_mean") return nullptr;
  auto autoencoder = std::make_shared<models::flux::AutoEncoder>(models::flux::AutoEncoderConfig{});
  if (e.random_init) {
    nn::initialize(*autoencoder, seed, "ae.");
  } else {
    models::flux::load_autoencoder(*autoencoder, e.autoencoder_path);
  }
  return autoencoder;
}

}  // namespace

std::string encoders_fingerprint(const JobConfig& config) {
  const EncoderSection& e = config.encoder;
  const auto seed = static_cast<uint64_t>(config.training.seed);
  const std::string identity = folder_identity(encoder_folder(e.t5_encoder, "t5_encoder"), e.random_init) +
                               folder_identity(encoder_folder(e.clip_encoder, "clip_encoder"), e.random_init) +
                               fmt::format("max_t5={} seed={} ", e.max_t5_encoding_len, e.random_init ? seed : 0) +
                               autoencoder_identity(e, seed);
  return fmt::format("{:016x}", data::hash_bytes(identity));
}

std::function<Tensor(const Tensor&)> latent_decoder(const JobConfig& config) {
  const std::shared_ptr<models::flux::AutoEncoder> autoencoder =
      build_autoencoder(config.encoder, static_cast<uint64_t>(config.training.seed));
  if (!autoencoder) return [](const Tensor& latents) { return models::flux::block_mean_decode(latents); };
  return [autoencoder](const Tensor& latents) { return autoencoder->decode(latents).to(DType::f32); };
}

FluxEncoders::FluxEncoders(const JobConfig& config) : max_t5_tokens_(config.encoder.max_t5_encoding_len) {
  const EncoderSection& e = config.encoder;
  TITAN_CHECK(max_t5_tokens_ > 0, "encoder.max_t5_encoding_len must be > 0, got {}", max_t5_tokens_);
  const fs::path t5_folder = encoder_folder(e.t5_encoder, "t5_encoder");
  const fs::path clip_folder = encoder_folder(e.clip_encoder, "clip_encoder");
  t5_tokenizer_ = std::make_unique<data::Tokenizer>(data::load_hf_tokenizer_file(t5_folder / "tokenizer.json"));
  clip_tokenizer_ = std::make_unique<data::Tokenizer>(data::load_hf_tokenizer_file(clip_folder / "tokenizer.json"));
  const auto seed = static_cast<uint64_t>(config.training.seed);
  if (e.random_init) {
    const fs::path t5_config = t5_folder / "config.json", clip_config = clip_folder / "config.json";
    t5_ = std::make_shared<models::flux::T5Encoder>(
        models::flux::parse_t5_encoder_config(data::read_file(t5_config, "T5 config"), t5_config.string()));
    nn::initialize(*t5_, seed, "t5.");
    clip_ = std::make_shared<models::flux::ClipTextEncoder>(
        models::flux::parse_clip_text_config(data::read_file(clip_config, "CLIP config"), clip_config.string()));
    nn::initialize(*clip_, seed, "clip.");
  } else {
    t5_ = models::flux::load_t5_encoder(t5_folder.string());
    clip_ = models::flux::load_clip_text_encoder(clip_folder.string());
  }
  autoencoder_ = build_autoencoder(e, seed);
  fingerprint_ = encoders_fingerprint(config);
}

FluxEncoders::~FluxEncoders() = default;

TextEncodings FluxEncoders::encode_captions(const std::vector<std::string>& captions) const {
  const autograd::NoGradGuard no_grad;
  const auto to_tensor = [](const data::PaddedIds& padded) {
    return Tensor::from_vector(padded.ids, {static_cast<int64_t>(padded.rows), static_cast<int64_t>(padded.length)});
  };
  const data::PaddedIds t5_ids = data::encode_padded(
      *t5_tokenizer_, captions, data::t5_padding(*t5_tokenizer_, static_cast<size_t>(max_t5_tokens_)));
  const data::PaddedIds clip_ids =
      data::encode_padded(*clip_tokenizer_, captions, data::clip_padding(*clip_tokenizer_, kClipTokens));
  return {t5_->forward(to_tensor(t5_ids)).to(DType::f32), clip_->forward(to_tensor(clip_ids)).pooled.to(DType::f32)};
}

Tensor FluxEncoders::encode_images(const Tensor& images) const {
  if (!autoencoder_) return models::flux::block_mean_encode(images);
  return autoencoder_->encode(images).to(DType::f32);
}

Tensor FluxEncoders::decode_latents(const Tensor& latents) const {
  if (!autoencoder_) return models::flux::block_mean_decode(latents);
  return autoencoder_->decode(latents).to(DType::f32);
}

int64_t FluxEncoders::latent_channels() const {
  return autoencoder_ ? autoencoder_->config.z_channels : models::flux::kBlockMeanChannels;
}

}  // namespace titan::train::flux
