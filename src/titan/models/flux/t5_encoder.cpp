#include "titan/models/flux/t5_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "titan/autograd/grad_mode.h"
#include "titan/core/error.h"
#include "titan/nn/functional.h"
#include "titan/nn/module_dict.h"

namespace titan::models::flux {

int64_t t5_relative_position_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance) {
  const int64_t half = num_buckets / 2, max_exact = half / 2;
  const int64_t bucket = relative_position > 0 ? half : 0;
  const int64_t distance = relative_position < 0 ? -relative_position : relative_position;
  if (distance < max_exact) return bucket + distance;
  // In f32 as T5 rounds it: a distance whose exact position is a whole
  // bucket (16, 32, 64 for T5 v1.1's 32 buckets over 128) falls as there.
  const float scaled =
      std::log(static_cast<float>(distance) / static_cast<float>(max_exact)) /
      static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact))) *
      static_cast<float>(half - max_exact);
  return bucket + std::min(max_exact + static_cast<int64_t>(scaled), half - 1);
}

namespace {

std::shared_ptr<nn::Linear> t5_linear(int64_t in, int64_t out, Device device) {
  return nn::LinearConfig{in, out, false}.build(device);
}

std::shared_ptr<nn::RMSNorm> t5_norm(const T5EncoderConfig& config, Device device) {
  return nn::RMSNormConfig{.dim = config.d_model, .eps = config.layer_norm_epsilon}.build(device);
}

T5EncoderConfig validated(const T5EncoderConfig& config) {
  config.validate();
  return config;
}

// [B, L, H * D] -> [B * H, L, D].
Tensor t5_heads(const Tensor& x, int64_t heads) {
  const int64_t b = x.size(0), l = x.size(1), d = x.size(2) / heads;
  return F::view(F::contiguous(F::permute(F::view(x, {b, l, heads, d}), {0, 2, 1, 3})), {b * heads, l, d});
}

}  // namespace

T5Attention::T5Attention(const T5EncoderConfig& config, bool has_relative_bias, Device device)
    : q(register_module("q", t5_linear(config.d_model, config.num_heads * config.d_kv, device))),
      k(register_module("k", t5_linear(config.d_model, config.num_heads * config.d_kv, device))),
      v(register_module("v", t5_linear(config.d_model, config.num_heads * config.d_kv, device))),
      o(register_module("o", t5_linear(config.num_heads * config.d_kv, config.d_model, device))),
      relative_attention_bias(
          has_relative_bias
              ? register_module(
                    "relative_attention_bias",
                    nn::EmbeddingConfig{config.relative_attention_num_buckets, config.num_heads}.build(device))
              : nullptr) {}

T5FeedForward::T5FeedForward(const T5EncoderConfig& config, Device device)
    : wi_0(register_module("wi_0", t5_linear(config.d_model, config.d_ff, device))),
      wi_1(register_module("wi_1", t5_linear(config.d_model, config.d_ff, device))),
      wo(register_module("wo", t5_linear(config.d_ff, config.d_model, device))) {}

T5SubLayer::T5SubLayer(const T5EncoderConfig& config, bool is_attention, bool has_relative_bias, Device device)
    : attention(is_attention
                    ? register_module("SelfAttention", std::make_shared<T5Attention>(config, has_relative_bias, device))
                    : nullptr),
      feed_forward(is_attention ? nullptr
                                : register_module("DenseReluDense", std::make_shared<T5FeedForward>(config, device))),
      layer_norm(register_module("layer_norm", t5_norm(config, device))) {}

T5Block::T5Block(const T5EncoderConfig& config, bool has_relative_bias, Device device)
    : self_attention(std::make_shared<T5SubLayer>(config, true, has_relative_bias, device)),
      feed_forward(std::make_shared<T5SubLayer>(config, false, false, device)) {
  auto layers = register_module("layer", std::make_shared<nn::ModuleDict<T5SubLayer>>());
  layers->insert("0", self_attention);
  layers->insert("1", feed_forward);
}

T5Encoder::T5Encoder(const T5EncoderConfig& config_in, Device device)
    : config(validated(config_in)),
      shared(register_module("shared", nn::EmbeddingConfig{config.vocab_size, config.d_model}.build(device))),
      final_layer_norm(t5_norm(config, device)) {
  auto encoder = register_module("encoder", std::make_shared<nn::ModuleDict<nn::Module>>());
  auto block_list = std::make_shared<nn::ModuleDict<T5Block>>();
  for (int64_t i = 0; i < config.num_layers; ++i) {
    blocks.push_back(std::make_shared<T5Block>(config, i == 0, device));
    block_list->insert(std::to_string(i), blocks.back());
  }
  encoder->insert("block", block_list);
  encoder->insert("final_layer_norm", final_layer_norm);
  name_modules();
}

Tensor T5Encoder::position_bias(int64_t length) const {
  std::vector<int64_t> buckets(static_cast<size_t>(length * length));
  for (int64_t i = 0; i < length; ++i) {
    for (int64_t j = 0; j < length; ++j) {
      buckets[static_cast<size_t>(i * length + j)] = t5_relative_position_bucket(
          j - i, config.relative_attention_num_buckets, config.relative_attention_max_distance);
    }
  }
  const Tensor table = blocks.front()->self_attention->attention->relative_attention_bias->forward(
      Tensor::from_vector(buckets, {length, length}));  // [L, L, H]
  return F::contiguous(F::permute(table, {2, 0, 1}));
}

Tensor T5Encoder::forward(const Tensor& ids, const Tensor& attention_mask) const {
  const ForwardScope scope(*this);
  const autograd::NoGradGuard frozen;
  TITAN_CHECK(ids.defined() && ids.dim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
              "t5: token ids must be [B, L] integers (got {})", ids.defined() ? shape_str(ids.shape()) : "nothing");
  const int64_t b = ids.size(0), l = ids.size(1), heads = config.num_heads;
  for (const int64_t id : ids.to_ints()) {
    TITAN_CHECK(id >= 0 && id < config.vocab_size, "t5: token id {} is outside the vocabulary of {}", id,
                config.vocab_size);
  }
  // The position bias of every head, and padding keys pushed out of every
  // softmax (-1e30, which bf16 holds too): [B * H, L, L].
  std::vector<float> bias = position_bias(l).to(DType::f32).to_floats();
  std::vector<float> combined(static_cast<size_t>(b * heads * l * l));
  std::vector<int64_t> mask = attention_mask.defined() ? attention_mask.to_ints() : std::vector<int64_t>();
  TITAN_CHECK(!attention_mask.defined() || attention_mask.shape() == ids.shape(),
              "t5: attention_mask {} must be the ids' shape {}", shape_str(attention_mask.shape()),
              shape_str(ids.shape()));
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < l; ++i) {
        for (int64_t j = 0; j < l; ++j) {
          const bool padding = !mask.empty() && mask[static_cast<size_t>(s * l + j)] == 0;
          combined[static_cast<size_t>(((s * heads + h) * l + i) * l + j)] =
              padding ? -1e30f : bias[static_cast<size_t>((h * l + i) * l + j)];
        }
      }
    }
  }
  Tensor x = shared->forward(ids);
  const Tensor score_bias = Tensor::from_floats(combined, {b * heads, l, l}).to(x.dtype());
  for (const auto& block : blocks) {
    const T5Attention& attention = *block->self_attention->attention;
    const Tensor h = block->self_attention->layer_norm->forward(x);
    const Tensor q = t5_heads(attention.q->forward(h), heads), key = t5_heads(attention.k->forward(h), heads),
                 value = t5_heads(attention.v->forward(h), heads);
    // No 1/sqrt(d) scaling: T5 folds it into its initialisation.
    const Tensor scores = F::add(F::matmul(q, F::contiguous(F::transpose(key, 1, 2))), score_bias);
    const Tensor out = F::matmul(F::softmax(scores), value);  // [B * H, L, D]
    const int64_t d = out.size(2);
    const Tensor merged =
        F::view(F::contiguous(F::permute(F::view(out, {b, heads, l, d}), {0, 2, 1, 3})), {b, l, heads * d});
    x = F::add(x, attention.o->forward(merged));
    const T5FeedForward& ff = *block->feed_forward->feed_forward;
    const Tensor g = block->feed_forward->layer_norm->forward(x);
    x = F::add(x, ff.wo->forward(F::geglu(ff.wi_0->forward(g), ff.wi_1->forward(g))));
  }
  return final_layer_norm->forward(x);
}

}  // namespace titan::models::flux
