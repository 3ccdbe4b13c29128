#include "titan/models/flux/clip_text_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "titan/autograd/grad_mode.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/models/flux/flux_layers.h"
#include "titan/nn/functional.h"
#include "titan/nn/module_dict.h"

namespace titan::models::flux {

AffineLayerNorm::AffineLayerNorm(int64_t width, double eps, Device device)
    : eps(eps),
      weight(register_parameter("weight", Tensor::empty({width}, DType::f32, device))),
      bias(register_parameter("bias", Tensor::empty({width}, DType::f32, device))) {
  weight->init = nn::InitRule::constant(1.0);
  bias->init = nn::InitRule::constant(0.0);
}

Tensor AffineLayerNorm::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  const Tensor normed = layer_norm_without_affine(x, static_cast<float>(eps));
  return F::add(F::mul(normed, F::expand(weight->materialize(), x.shape())), F::expand(bias->materialize(), x.shape()));
}

namespace {

std::shared_ptr<nn::Linear> clip_linear(int64_t in, int64_t out, Device device) {
  return nn::LinearConfig{in, out, true}.build(device);
}

ClipTextConfig validated(const ClipTextConfig& config) {
  config.validate();
  return config;
}

}  // namespace

ClipAttention::ClipAttention(const ClipTextConfig& config, Device device)
    : k_proj(register_module("k_proj", clip_linear(config.hidden_size, config.hidden_size, device))),
      v_proj(register_module("v_proj", clip_linear(config.hidden_size, config.hidden_size, device))),
      q_proj(register_module("q_proj", clip_linear(config.hidden_size, config.hidden_size, device))),
      out_proj(register_module("out_proj", clip_linear(config.hidden_size, config.hidden_size, device))) {}

ClipMLP::ClipMLP(const ClipTextConfig& config, Device device)
    : fc1(register_module("fc1", clip_linear(config.hidden_size, config.intermediate_size, device))),
      fc2(register_module("fc2", clip_linear(config.intermediate_size, config.hidden_size, device))) {}

ClipLayer::ClipLayer(const ClipTextConfig& config, Device device)
    : self_attn(register_module("self_attn", std::make_shared<ClipAttention>(config, device))),
      layer_norm1(register_module(
          "layer_norm1", std::make_shared<AffineLayerNorm>(config.hidden_size, config.layer_norm_eps, device))),
      mlp(register_module("mlp", std::make_shared<ClipMLP>(config, device))),
      layer_norm2(register_module(
          "layer_norm2", std::make_shared<AffineLayerNorm>(config.hidden_size, config.layer_norm_eps, device))) {}

ClipTextEncoder::ClipTextEncoder(const ClipTextConfig& config_in, Device device)
    : config(validated(config_in)),
      token_embedding(nn::EmbeddingConfig{config.vocab_size, config.hidden_size}.build(device)),
      position_embedding(nn::EmbeddingConfig{config.max_position_embeddings, config.hidden_size}.build(device)),
      final_layer_norm(std::make_shared<AffineLayerNorm>(config.hidden_size, config.layer_norm_eps, device)) {
  // Hugging Face's tree: text_model.{embeddings, encoder.layers, final_layer_norm}.
  auto text_model = register_module("text_model", std::make_shared<nn::ModuleDict<nn::Module>>());
  auto embeddings = std::make_shared<nn::ModuleDict<nn::Module>>();
  embeddings->insert("token_embedding", token_embedding);
  embeddings->insert("position_embedding", position_embedding);
  auto encoder = std::make_shared<nn::ModuleDict<nn::Module>>();
  auto layer_list = std::make_shared<nn::ModuleDict<ClipLayer>>();
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    layers.push_back(std::make_shared<ClipLayer>(config, device));
    layer_list->insert(std::to_string(i), layers.back());
  }
  encoder->insert("layers", layer_list);
  text_model->insert("embeddings", embeddings);
  text_model->insert("encoder", encoder);
  text_model->insert("final_layer_norm", final_layer_norm);
  name_modules();
}

ClipTextOutput ClipTextEncoder::forward(const Tensor& ids) const {
  const ForwardScope scope(*this);
  const autograd::NoGradGuard frozen;
  TITAN_CHECK(ids.defined() && ids.dim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
              "clip: token ids must be [B, L] integers (got {})", ids.defined() ? shape_str(ids.shape()) : "nothing");
  const int64_t b = ids.size(0), l = ids.size(1), heads = config.num_attention_heads;
  TITAN_CHECK(l > 0 && l <= config.max_position_embeddings, "clip: {} tokens exceed max_position_embeddings {}", l,
              config.max_position_embeddings);
  const std::vector<int64_t> values = ids.to_ints();
  for (const int64_t id : values) {
    TITAN_CHECK(id >= 0 && id < config.vocab_size, "clip: token id {} is outside the vocabulary of {}", id,
                config.vocab_size);
  }
  Tensor x = F::add(token_embedding->forward(ids),
                    F::expand(F::reshape(position_embedding->forward(Tensor::arange(l)), {1, l, config.hidden_size}),
                              {b, l, config.hidden_size}));
  const int64_t head_dim = config.hidden_size / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (const auto& layer : layers) {
    const Tensor h = layer->layer_norm1->forward(x);
    const auto heads_of = [&](const nn::Linear& projection) {
      return F::view(projection.forward(h), {b, l, heads, head_dim});
    };
    const Tensor out =
        F::scaled_dot_product_attention(heads_of(*layer->self_attn->q_proj), heads_of(*layer->self_attn->k_proj),
                                        heads_of(*layer->self_attn->v_proj), ops::AttentionMask(true), scale);
    x = F::add(x, layer->self_attn->out_proj->forward(F::view(out, {b, l, config.hidden_size})));
    const Tensor g = layer->mlp->fc1->forward(layer->layer_norm2->forward(x));
    x = F::add(x, layer->mlp->fc2->forward(F::mul(g, F::sigmoid(F::scale(g, 1.702f)))));
  }
  x = final_layer_norm->forward(x);
  // The first end-of-text token: the first position holding the row's largest id.
  Tensor pooled = Tensor::empty({b, config.hidden_size}, x.dtype(), x.device());
  for (int64_t s = 0; s < b; ++s) {
    const auto row = values.begin() + s * l;
    const int64_t end = std::max_element(row, row + l) - row;
    titan::copy_(pooled.select(0, s), x.select(0, s).select(0, end));
  }
  return {x, pooled};
}

}  // namespace titan::models::flux
