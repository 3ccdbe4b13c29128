// The T5 v1.1 encoder (Hugging Face's T5EncoderModel), FLUX.1's frozen text
// encoder: RMS layer norms without bias, attention without score scaling
// over a learned relative-position bias (bucketed by distance, held by the
// first block and shared by all), a gated-GELU (tanh) feed-forward, pre-norm
// residual blocks and a final norm. Parameters carry Hugging Face's names
// ("encoder.block.0.layer.0.SelfAttention.q.weight"). Inference only.
#pragma once

#include <memory>
#include <vector>

#include "titan/models/flux/t5_encoder_config.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"
#include "titan/nn/rms_norm.h"

namespace titan::models::flux {

// The bucket of a key `relative_position` = key - query tokens away
// (bidirectional: half the buckets for keys after the query; within a half,
// distances under a quarter of the buckets have one each, larger ones share
// logarithmically wider buckets up to max_distance, and farther ones the
// last). Computed in f32, as T5's own implementation rounds.
int64_t t5_relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance);

class T5Attention : public nn::Module {
 public:
  T5Attention(const T5EncoderConfig& config, bool has_relative_bias, Device device);
  std::shared_ptr<nn::Linear> q, k, v, o;
  std::shared_ptr<nn::Embedding> relative_attention_bias;  // [buckets, heads]; first block only
};

class T5FeedForward : public nn::Module {
 public:
  T5FeedForward(const T5EncoderConfig& config, Device device);
  std::shared_ptr<nn::Linear> wi_0, wi_1, wo;
};

// One of a block's two sub-layers ("layer.0": attention, "layer.1": feed-forward), each with its norm.
class T5SubLayer : public nn::Module {
 public:
  T5SubLayer(const T5EncoderConfig& config, bool is_attention, bool has_relative_bias, Device device);
  std::shared_ptr<T5Attention> attention;       // "SelfAttention"
  std::shared_ptr<T5FeedForward> feed_forward;  // "DenseReluDense"
  std::shared_ptr<nn::RMSNorm> layer_norm;
};

class T5Block : public nn::Module {
 public:
  T5Block(const T5EncoderConfig& config, bool has_relative_bias, Device device);
  std::shared_ptr<T5SubLayer> self_attention, feed_forward;
};

class T5Encoder : public nn::Module {
 public:
  explicit T5Encoder(const T5EncoderConfig& config, Device device = Device::cpu());
  // ids [B, L] i64; attention_mask [B, L] (1: a token, 0: padding; undefined:
  // no padding) -> the last hidden state [B, L, d_model] f32.
  Tensor forward(const Tensor& ids, const Tensor& attention_mask = Tensor()) const;
  // [heads, L, L]: the bias of key j for query i.
  Tensor position_bias(int64_t length) const;

  const T5EncoderConfig config;
  std::shared_ptr<nn::Embedding> shared;
  std::vector<std::shared_ptr<T5Block>> blocks;
  std::shared_ptr<nn::RMSNorm> final_layer_norm;
};

}  // namespace titan::models::flux
