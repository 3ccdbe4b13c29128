#include "titan/models/decoder.h"

#include <cmath>

#include "titan/nn/functional.h"

namespace titan::models {

std::shared_ptr<Decoder> DecoderConfig::build(Device device) const { return std::make_shared<Decoder>(*this, device); }

Decoder::Decoder(const DecoderConfig& config, Device device) : config(config) {
  TITAN_CHECK(config.vocab_size > 0 && config.n_layers > 0, "Decoder: vocab_size and n_layers must be positive");
  tok_embeddings =
      register_module("tok_embeddings", nn::EmbeddingConfig{config.vocab_size, config.dim()}.build(device));
  layers = register_module("layers", std::make_shared<nn::ModuleList<nn::TransformerBlock>>());
  for (int64_t i = 0; i < config.n_layers; ++i) layers->push_back(config.block.build(device));
  norm = register_module("norm", nn::RMSNormConfig{config.dim(), config.block.norm_eps}.build(device));
  if (!config.tie_embeddings) {
    output = register_module("output", nn::LinearConfig{config.dim(), config.vocab_size}.build(device));
  }
  loss_function = cross_entropy_loss(config.loss);
  // The table is data, not state: rebuilt from the config, never checkpointed.
  const int64_t head = config.block.attention.head_size();
  if (device.is_meta()) {
    rope = {Tensor::empty({config.max_seq_len, head / 2}, DType::f32, device),
            Tensor::empty({config.max_seq_len, head / 2}, DType::f32, device)};
  } else {
    rope = ops::rope_table(head, config.max_seq_len, config.rope_theta, config.rope_scaling, device);
  }
}

Tensor Decoder::hidden_states(const DecoderInputs& inputs) const {
  const Tensor& ids = inputs.input_ids;
  TITAN_CHECK(ids.dim() == 2, "Decoder: input_ids must be [batch, seq], got {}", shape_str(ids.shape()));
  TITAN_CHECK(ids.size(1) <= config.max_seq_len, "Decoder: sequence of {} exceeds max_seq_len {}", ids.size(1),
              config.max_seq_len);
  nn::AttentionInputs attention{&rope, inputs.positions, {}};
  attention.mask.causal = true;
  attention.mask.document_ids = inputs.document_ids;
  Tensor h = tok_embeddings->forward(ids);
  for (const auto& layer : *layers) h = layer->forward(h, attention);
  return norm->forward(h);
}

KVCache Decoder::make_cache(int64_t batch, int64_t capacity, DType dtype) const {
  TITAN_CHECK(capacity <= config.max_seq_len, "KV cache of {} positions exceeds max_seq_len {}", capacity,
              config.max_seq_len);
  const auto& a = config.block.attention;
  KVCache cache;
  for (int64_t i = 0; i < config.n_layers; ++i) {
    cache.keys.push_back(Tensor::zeros({batch, capacity, a.kv_heads(), a.head_size()}, dtype, rope.cos.device()));
    cache.values.push_back(Tensor::zeros({batch, capacity, a.kv_heads(), a.head_size()}, dtype, rope.cos.device()));
  }
  return cache;
}

Tensor Decoder::forward_cached(const Tensor& input_ids, KVCache& cache) const {
  TITAN_CHECK(input_ids.dim() == 2, "Decoder: input_ids must be [batch, tokens], got {}", shape_str(input_ids.shape()));
  const int64_t batch = input_ids.size(0), tokens = input_ids.size(1), start = cache.length;
  TITAN_CHECK(start + tokens <= cache.capacity(), "Decoder: {} + {} positions overflow the KV cache of {}", start,
              tokens, cache.capacity());
  std::vector<int64_t> positions(static_cast<size_t>(batch * tokens));
  for (int64_t i = 0; i < batch * tokens; ++i) positions[static_cast<size_t>(i)] = start + i % tokens;
  nn::AttentionInputs attention{&rope, Tensor::from_vector(positions, {batch, tokens}).to(input_ids.device()), {}};
  Tensor h = tok_embeddings->forward(input_ids);
  for (size_t i = 0; i < layers->size(); ++i) {
    h = (*layers)[i]->forward_cached(h, attention, cache.keys[i], cache.values[i], start);
  }
  cache.length = start + tokens;
  return F::linear(norm->forward(h), output_weight());
}

Tensor Decoder::output_weight() const {
  return config.tie_embeddings ? tok_embeddings->weight->materialize() : output->weight->materialize();
}

Tensor Decoder::logits(const DecoderInputs& inputs) const { return F::linear(hidden_states(inputs), output_weight()); }

LossFunction cross_entropy_loss(const LossConfig& config) {
  return [config](const Tensor& hidden, const Tensor& weight, const Tensor& labels) {
    const Tensor flat = F::reshape(hidden, {-1, hidden.size(-1)});
    const Tensor targets = labels.reshape({-1});
    ops::CrossEntropyOptions options{.ignore_index = -100, .softcap = config.softcap, .z_loss = config.z_loss};
    if (config.fused) {
      ops::FusedCrossEntropyOptions fused;
      fused.loss = options;
      fused.token_chunk = config.token_chunk;
      fused.vocab_chunk = config.vocab_chunk;
      return F::fused_linear_cross_entropy(flat, weight, targets, fused);
    }
    return F::cross_entropy(F::linear(flat, weight), targets, options);
  };
}

Tensor Decoder::loss(const DecoderInputs& inputs, const Tensor& labels) const {
  return loss_function(hidden_states(inputs), output_weight(), labels);
}

void Decoder::init_weights(Generator& generator) {
  // A tied table is also the output projection: N(0, 1) rows would make the
  // first logits O(sqrt(dim)), so it takes the output layer's scale instead.
  const double output_std = 1.0 / std::sqrt(static_cast<double>(config.dim()));
  tok_embeddings->init_weights(generator, config.tie_embeddings ? output_std : 1.0);
  for (size_t i = 0; i < layers->size(); ++i) {
    (*layers)[i]->init_weights(generator, 0.02 / std::sqrt(2.0 * static_cast<double>(i + 1)));
  }
  norm->init_weights();
  if (output) output->init_weights(generator, output_std, -3.0 * output_std, 3.0 * output_std);
}

}  // namespace titan::models
