#include "titan/nn/gated_delta_net.h"

#include <algorithm>
#include <cmath>

#include "titan/core/copy.h"

#include "titan/nn/functional.h"

namespace titan::nn {

std::shared_ptr<GatedDeltaNet> GatedDeltaNetConfig::build(Device device) const {
  return std::make_shared<GatedDeltaNet>(*this, device);
}

namespace gated_delta_net_checks {

const GatedDeltaNetConfig& checked(const GatedDeltaNetConfig& c) {
  TITAN_CHECK(c.dim > 0 && c.n_key_heads > 0 && c.n_value_heads > 0 && c.key_head_dim > 0 && c.value_head_dim > 0,
              "GatedDeltaNet: dim, heads and head dims must be positive");
  TITAN_CHECK(c.n_value_heads % c.n_key_heads == 0,
              "GatedDeltaNet: n_value_heads {} is not a multiple of n_key_heads {}", c.n_value_heads, c.n_key_heads);
  TITAN_CHECK(c.conv_kernel_size >= 1, "GatedDeltaNet: conv_kernel_size {} must be positive", c.conv_kernel_size);
  return c;
}

}  // namespace gated_delta_net_checks

GatedDeltaNet::GatedDeltaNet(const GatedDeltaNetConfig& config, Device device)
    : config(gated_delta_net_checks::checked(config)),
      a_log(register_parameter("A_log", Tensor::empty({config.n_value_heads}, DType::f32, device))),
      dt_bias(register_parameter("dt_bias", Tensor::empty({config.n_value_heads}, DType::f32, device))),
      norm(register_parameter("norm", Tensor::empty({config.value_head_dim}, DType::f32, device))) {
  const auto projection = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, LinearConfig{in, out}.build(device));
  };
  in_proj_q = projection("in_proj_q", config.dim, config.key_dim());
  in_proj_k = projection("in_proj_k", config.dim, config.key_dim());
  in_proj_v = projection("in_proj_v", config.dim, config.value_dim());
  if (config.output_gate) in_proj_z = projection("in_proj_z", config.dim, config.value_dim());
  if (config.short_conv) {
    const auto conv = [&](const char* name, int64_t channels) {
      return register_parameter(name, Tensor::empty({channels, config.conv_kernel_size}, DType::f32, device));
    };
    conv_q = conv("conv_q", config.key_dim());
    conv_k = conv("conv_k", config.key_dim());
    conv_v = conv("conv_v", config.value_dim());
  }
  in_proj_a = projection("in_proj_a", config.dim, config.n_value_heads);
  in_proj_b = projection("in_proj_b", config.dim, config.n_value_heads);
  out_proj = projection("out_proj", config.value_dim(), config.dim);
  set_init(0.02);
}

Tensor GatedDeltaNet::forward(const Tensor& input, const AttentionInputs& inputs) const {
  const ForwardScope scope(*this);
  const Tensor x = pre_forward(input);
  const int64_t batch = x.size(0), tokens = x.size(1);
  const Tensor& documents = inputs.mask.document_ids;
  const auto conv = [&](const std::shared_ptr<Linear>& projection, Parameter* weight, int64_t heads, int64_t head_dim) {
    const Tensor projected = projection->forward(x);
    const Tensor y = weight ? F::causal_conv1d_silu(projected, weight->materialize(), documents) : projected;
    return F::view(y, {batch, tokens, heads, head_dim});
  };
  const Tensor q = conv(in_proj_q, conv_q, local_key_heads(), config.key_head_dim);
  const Tensor k = conv(in_proj_k, conv_k, local_key_heads(), config.key_head_dim);
  const Tensor v = conv(in_proj_v, conv_v, local_value_heads(), config.value_head_dim);
  const auto [g, beta] =
      F::gdn_gates(in_proj_a->forward(x), in_proj_b->forward(x), F::cast(a_log->materialize(), DType::f32),
                   F::cast(dt_bias->materialize(), DType::f32));
  ops::DeltaRuleOptions options;
  options.chunk_size = config.chunk_size;
  options.document_ids = documents;
  const Tensor o = F::gated_delta_rule(q, k, v, g, beta, Tensor(), options).out;  // [B, S, Hv, Dv]
  return post_forward(output(x, o));
}

Tensor GatedDeltaNet::output(const Tensor& x, const Tensor& o) const {
  const int64_t batch = x.size(0), tokens = x.size(1);
  Tensor gated = F::rms_norm(o, F::cast(norm->materialize(), o.dtype()), static_cast<float>(config.norm_eps));
  if (in_proj_z) {
    const Tensor z = F::view(in_proj_z->forward(x), {batch, tokens, local_value_heads(), config.value_head_dim});
    gated = F::mul(gated, F::silu(z));
  }
  return out_proj->forward(F::view(gated, {batch, tokens, local_value_heads() * config.value_head_dim}));
}

Tensor GatedDeltaNet::forward_cached(const Tensor& input, const Tensor& conv_cache, const Tensor& state,
                                     int64_t start) const {
  const ForwardScope scope(*this);
  const Tensor x = pre_forward(input);
  const int64_t batch = x.size(0), tokens = x.size(1), key_dim = config.key_dim() / head_split_;
  const int64_t value_dim = config.value_dim() / head_split_, channels = 2 * key_dim + value_dim;
  TITAN_CHECK(conv_cache.dim() == 3 && conv_cache.size(2) == channels && start + tokens <= conv_cache.size(1),
              "GatedDeltaNet: conv cache {} does not hold {} channels at positions [{}, {})",
              shape_str(conv_cache.shape()), channels, start, start + tokens);
  const Tensor fresh = F::concat(F::concat(in_proj_q->forward(x), in_proj_k->forward(x), 2), in_proj_v->forward(x), 2);
  titan::copy_(conv_cache.narrow(1, start, tokens), fresh);
  // The conv's receptive field: the K - 1 cached positions before start (fewer at the sequence start, where the
  // conv pads with zeros anyway), then the new tokens; the last `tokens` outputs are theirs.
  const int64_t from = std::max<int64_t>(0, start - (config.conv_kernel_size - 1)), span = start + tokens - from;
  const Tensor window = conv_cache.narrow(1, from, span);
  const auto conv = [&](Parameter* weight, int64_t offset, int64_t channels, int64_t heads, int64_t head_dim) {
    const Tensor in = window.narrow(2, offset, channels).contiguous();
    const Tensor y = weight ? F::causal_conv1d_silu(in, weight->materialize()) : in;
    return F::view(y.narrow(1, span - tokens, tokens).contiguous(), {batch, tokens, heads, head_dim});
  };
  const Tensor q = conv(conv_q, 0, key_dim, local_key_heads(), config.key_head_dim);
  const Tensor k = conv(conv_k, key_dim, key_dim, local_key_heads(), config.key_head_dim);
  const Tensor v = conv(conv_v, 2 * key_dim, value_dim, local_value_heads(), config.value_head_dim);
  const auto [g, beta] =
      F::gdn_gates(in_proj_a->forward(x), in_proj_b->forward(x), F::cast(a_log->materialize(), DType::f32),
                   F::cast(dt_bias->materialize(), DType::f32));
  const F::GatedDeltaRuleResult step = F::gated_delta_rule_step(q, k, v, g, beta, state);
  titan::copy_(state, step.final_state);
  return post_forward(output(x, step.out));
}

void GatedDeltaNet::split_heads(int64_t ways) {
  TITAN_CHECK(ways >= 1 && config.n_key_heads % ways == 0,
              "GatedDeltaNet: {} key heads ({} value heads) do not split over {} ranks", config.n_key_heads,
              config.n_value_heads, ways);
  head_split_ = ways;
}

void GatedDeltaNet::set_init(double output_std) {
  for (const auto& projection : {in_proj_q, in_proj_k, in_proj_v, in_proj_z, in_proj_a, in_proj_b}) {
    if (projection) projection->set_init(0.02);
  }
  out_proj->set_init(output_std);
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.conv_kernel_size));
  for (Parameter* conv : {conv_q, conv_k, conv_v}) {
    if (conv) conv->init = InitRule::uniform(-bound, bound);
  }
  a_log->init = InitRule::uniform(std::log(0.01), std::log(16.0));
  dt_bias->init = InitRule::constant(1.0);
  norm->init = InitRule::constant(1.0);
}

}  // namespace titan::nn
