#include "titan/nn/transformer_block.h"

#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<TransformerBlock> TransformerBlockConfig::build(Device device) const {
  return std::make_shared<TransformerBlock>(*this, device);
}

TransformerBlock::TransformerBlock(const TransformerBlockConfig& config, Device device) : config(config) {
  const int64_t ffn_dim = config.moe ? config.moe->dim : config.feed_forward.dim;
  TITAN_CHECK(config.attention.dim == ffn_dim, "TransformerBlock: attention dim {} differs from the FFN's dim {}",
              config.attention.dim, ffn_dim);
  TITAN_CHECK(!(config.mla && config.delta_net), "TransformerBlock: a block has latent or linear attention, not both");
  if (config.delta_net) {
    TITAN_CHECK(config.delta_net->dim == config.attention.dim,
                "TransformerBlock: the linear attention's dim {} differs from the block's {}", config.delta_net->dim,
                config.attention.dim);
    linear_attention = register_module("attention", config.delta_net->build(device));
  } else if (config.mla) {
    latent_attention =
        register_module("attention", std::make_shared<MlaAttention>(*config.mla, config.attention, device));
  } else {
    attention = register_module("attention", config.attention.build(device));
  }
  if (config.moe) {
    moe = register_module("moe", config.moe->build(device));
  } else {
    feed_forward = register_module("feed_forward", config.feed_forward.build(device));
  }
  TITAN_CHECK(config.pre_norms || config.post_norms, "TransformerBlock: a block needs pre-norms, post-norms or both");
  const RMSNormConfig norm{config.attention.dim, config.norm_eps, config.norm_weight_offset};
  if (config.pre_norms) {
    attention_norm = register_module("attention_norm", norm.build(device));
    ffn_norm = register_module("ffn_norm", norm.build(device));
  }
  if (config.post_norms) {
    RMSNormConfig post = norm;
    if (config.post_norm_eps > 0) post.eps = config.post_norm_eps;
    post_attention_norm = register_module("post_attention_norm", post.build(device));
    post_ffn_norm = register_module("post_ffn_norm", post.build(device));
  }
}

namespace {

// `norm` applied to x, or x itself when the block has no such norm.
Tensor maybe_norm(const std::shared_ptr<RMSNorm>& norm, const Tensor& x) { return norm ? norm->forward(x) : x; }

}  // namespace

Tensor TransformerBlock::forward(const Tensor& x, const BlockInputs& inputs) const {
  const ForwardScope scope(*this);
  if (!runner()) return compute(x, inputs);
  // The body may run again in backward, after this call returns: capture by value.
  return run([this, inputs](const Tensor& in) { return compute(in, inputs); }, x);
}

Tensor TransformerBlock::residual(const Tensor& x, const std::function<Tensor(const Tensor&)>& attend,
                                  const std::shared_ptr<MoEAuxLoss>& aux) const {
  const Tensor h = F::add(x, maybe_norm(post_attention_norm, attend(maybe_norm(attention_norm, x))));
  const Tensor normed = maybe_norm(ffn_norm, h);
  return F::add(h, maybe_norm(post_ffn_norm, moe ? moe->forward(normed, aux) : feed_forward->forward(normed)));
}

Tensor TransformerBlock::compute(const Tensor& x, const BlockInputs& inputs) const {
  return residual(
      x,
      [&](const Tensor& normed) {
        if (linear_attention) return linear_attention->forward(normed, inputs.attention);
        return latent_attention ? latent_attention->forward(normed, inputs.attention)
                                : attention->forward(normed, inputs.attention);
      },
      inputs.moe_aux);
}

Tensor TransformerBlock::forward_cached(const Tensor& x, const AttentionInputs& inputs, const Tensor& key_cache,
                                        const Tensor& value_cache, int64_t start) const {
  const ForwardScope scope(*this);
  const BlockBody body = [&](const Tensor& in) {
    return residual(
        in,
        [&](const Tensor& normed) {
          // A linear-attention layer's "keys" are its pre-conv features, its "values" the recurrent state.
          if (linear_attention) return linear_attention->forward_cached(normed, key_cache, value_cache, start);
          return latent_attention ? latent_attention->forward_cached(normed, inputs, key_cache, value_cache, start)
                                  : attention->forward_cached(normed, inputs, key_cache, value_cache, start);
        },
        nullptr);
  };
  // Through the runner, as forward: FSDP gathers the block's weights around it.
  return run(body, x);
}

void TransformerBlock::set_init(double output_std) {
  if (linear_attention) {
    linear_attention->set_init(output_std);
  } else if (latent_attention) {
    latent_attention->set_init(output_std);
  } else {
    attention->set_init(output_std);
  }
  if (moe) {
    moe->set_init(output_std);
  } else {
    feed_forward->set_init(output_std);
  }
}

}  // namespace titan::nn
