#include "titan/nn/transformer_block.h"

#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<TransformerBlock> TransformerBlockConfig::build(Device device) const {
  return std::make_shared<TransformerBlock>(*this, device);
}

TransformerBlock::TransformerBlock(const TransformerBlockConfig& config, Device device) : config(config) {
  TITAN_CHECK(config.attention.dim == config.feed_forward.dim,
              "TransformerBlock: attention dim {} differs from feed-forward dim {}", config.attention.dim,
              config.feed_forward.dim);
  attention = register_module("attention", config.attention.build(device));
  feed_forward = register_module("feed_forward", config.feed_forward.build(device));
  attention_norm =
      register_module("attention_norm", RMSNormConfig{config.attention.dim, config.norm_eps}.build(device));
  ffn_norm = register_module("ffn_norm", RMSNormConfig{config.attention.dim, config.norm_eps}.build(device));
}

Tensor TransformerBlock::forward(const Tensor& x, const AttentionInputs& inputs) const {
  if (!runner_) return compute(x, inputs);
  // The body may run again in backward, after this call returns: capture by value.
  return runner_([this, inputs](const Tensor& in) { return compute(in, inputs); }, x);
}

Tensor TransformerBlock::residual(const Tensor& x, const std::function<Tensor(const Tensor&)>& attend) const {
  const Tensor h = F::add(x, attend(attention_norm->forward(x)));
  return F::add(h, feed_forward->forward(ffn_norm->forward(h)));
}

Tensor TransformerBlock::compute(const Tensor& x, const AttentionInputs& inputs) const {
  return residual(x, [&](const Tensor& normed) { return attention->forward(normed, inputs); });
}

Tensor TransformerBlock::forward_cached(const Tensor& x, const AttentionInputs& inputs, const Tensor& key_cache,
                                        const Tensor& value_cache, int64_t start) const {
  return residual(x, [&](const Tensor& normed) {
    return attention->forward_cached(normed, inputs, key_cache, value_cache, start);
  });
}

void TransformerBlock::init_weights(Generator& generator, double output_std) {
  attention_norm->init_weights();
  ffn_norm->init_weights();
  attention->init_weights(generator, output_std);
  feed_forward->init_weights(generator, output_std);
}

}  // namespace titan::nn
