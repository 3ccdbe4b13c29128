// A FLUX job's frozen encoders, built from its [encoder] keys: T5 and CLIP
// with their tokenizers (Hugging Face folders), and the autoencoder (FLUX.1's
// ae.safetensors, or the weightless block-mean one). Inference only, f32.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/data/tokenizer.h"
#include "titan/models/flux/clip_text_encoder.h"
#include "titan/models/flux/flux_autoencoder.h"
#include "titan/models/flux/t5_encoder.h"
#include "titan/train/job_config.h"

namespace titan::train::flux {

struct TextEncodings {
  Tensor t5;    // [B, max_t5_encoding_len, d_model] f32: T5's last hidden states
  Tensor clip;  // [B, hidden] f32: CLIP's pooled output
};

// What produces a job's encodings, hashed, read from its [encoder] keys
// without loading a weight: the encoders' configs and tokenizers, their
// weights' file names and sizes (or the seed they are drawn from), the
// autoencoder, max_t5_encoding_len.
std::string encoders_fingerprint(const JobConfig& config);

class FluxEncoders {
 public:
  // encoder.t5_encoder and encoder.clip_encoder name Hugging Face folders
  // (config.json, tokenizer.json, and unless encoder.random_init the
  // weights); encoder.autoencoder picks the autoencoder. With random_init the
  // weights are drawn from training.seed, by name.
  explicit FluxEncoders(const JobConfig& config);
  ~FluxEncoders();

  // Each caption tokenized as FLUX does (T5: max_t5_encoding_len ids closed by
  // </s>, padded; CLIP: 77 with BOS and EOS, padded with EOS) and encoded
  // without attention masks, as FLUX's pipelines run them.
  TextEncodings encode_captions(const std::vector<std::string>& captions) const;
  // Images [B, 3, S, S] in [-1, 1] -> latents [B, C, S / 8, S / 8] f32 (the
  // Gaussian's mean for FLUX.1's autoencoder).
  Tensor encode_images(const Tensor& images) const;
  // Latents -> images [B, 3, S, S] in [-1, 1].
  Tensor decode_latents(const Tensor& latents) const;
  // Latent channels per image (16 for FLUX.1's autoencoder, 12 block-mean).
  int64_t latent_channels() const;
  // encoders_fingerprint(config): what a prepared dataset records in its manifest.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  int64_t max_t5_tokens_;
  std::unique_ptr<data::Tokenizer> t5_tokenizer_, clip_tokenizer_;
  std::shared_ptr<models::flux::T5Encoder> t5_;
  std::shared_ptr<models::flux::ClipTextEncoder> clip_;
  std::shared_ptr<models::flux::AutoEncoder> autoencoder_;  // null: block-mean
  std::string fingerprint_;
};

// The job's autoencoder's decoder alone (what validation images need, without
// loading the text encoders): latents -> images [B, 3, S, S] in [-1, 1].
std::function<Tensor(const Tensor& latents)> latent_decoder(const JobConfig& config);

}  // namespace titan::train::flux
