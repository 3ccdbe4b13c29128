#include "titan/models/decoder.h"

#include <algorithm>
#include <cmath>

#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/nn/initialize.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/moe_routing.h"
#include "titan/ops/reduction.h"

namespace titan::models {

std::shared_ptr<Decoder> DecoderConfig::build(Device device) const { return std::make_shared<Decoder>(*this, device); }

namespace {

int64_t first_moe_layer(const DecoderConfig& config) {
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    if (config.layers[static_cast<size_t>(i)].moe) return i;
  }
  return -1;
}

}  // namespace

Decoder::Decoder(const DecoderConfig& config, Device device) : config(config) {
  TITAN_CHECK(config.vocab_size > 0 && config.n_layers() > 0, "Decoder: vocab_size and the layers must be positive");
  const int64_t rotary = config.layers.front().attention.rotary_size();
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    const nn::AttentionConfig& a = config.layers[static_cast<size_t>(i)].attention;
    TITAN_CHECK(a.dim == config.dim(), "Decoder: layer {} has dim {}, layer 0 has {}", i, a.dim, config.dim());
    TITAN_CHECK(!a.rope || a.rotary_size() == rotary,
                "Decoder: layer {} rotates {} features of each head with a RoPE table for {} (one table per model)", i,
                a.rotary_size(), rotary);
  }
  tok_embeddings =
      register_module("tok_embeddings", nn::EmbeddingConfig{config.vocab_size, config.dim()}.build(device));
  layers = register_module("layers", std::make_shared<nn::ModuleDict<nn::TransformerBlock>>());
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    auto block = config.layers[static_cast<size_t>(i)].build(device);
    if (block->moe) {
      // One auxiliary loss spans every MoE layer (nn::MoEAuxLoss): they must agree on what it is.
      const nn::MoEConfig& moe = block->moe->config;
      const nn::MoEConfig& first = *config.layers[static_cast<size_t>(first_moe_layer(config))].moe;
      TITAN_CHECK(moe.num_experts == first.num_experts && moe.aux_loss_coef == first.aux_loss_coef,
                  "Decoder: layer {} has {} experts and aux_loss_coef {}, the first MoE layer {} and {}", i,
                  moe.num_experts, moe.aux_loss_coef, first.num_experts, first.aux_loss_coef);
      block->moe->aux_slot = moe_layers_++;
    }
    layers->insert(std::to_string(i), block);
  }
  if (!config.mtp_layers.empty()) {
    mtp_layers = register_module("mtp_layers", std::make_shared<nn::ModuleDict<nn::MtpBlock>>());
    for (size_t k = 0; k < config.mtp_layers.size(); ++k) {
      TITAN_CHECK(config.mtp_layers[k].attention.dim == config.dim(), "Decoder: MTP depth {} has dim {}, the model {}",
                  k + 1, config.mtp_layers[k].attention.dim, config.dim());
      auto block = std::make_shared<nn::MtpBlock>(config.mtp_layers[k], device);
      // An MTP layer's experts join the auxiliary loss like any MoE layer's (same count and coefficient).
      if (block->moe) {
        const int64_t first = first_moe_layer(config);
        TITAN_CHECK(
            first >= 0 && block->moe->config.num_experts == config.layers[static_cast<size_t>(first)].moe->num_experts,
            "Decoder: MTP depth {} has a mixture of experts unlike the model's MoE layers", k + 1);
        block->moe->aux_slot = moe_layers_++;
      }
      mtp_layers->insert(std::to_string(k), block);
    }
  }
  const nn::TransformerBlockConfig& first = config.layers.front();
  nn::RMSNormConfig final_norm =
      config.final_norm.value_or(nn::RMSNormConfig{0, first.norm_eps, first.norm_weight_offset});
  final_norm.dim = config.dim();
  norm = register_module("norm", final_norm.build(device));
  if (!config.tie_embeddings) {
    output = register_module("output", nn::LinearConfig{config.dim(), config.vocab_size}.build(device));
  }
  loss_function = cross_entropy_loss(config.loss);
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    TITAN_CHECK(!config.layers[static_cast<size_t>(i)].attention.local_rope || config.local_rope_theta > 0,
                "Decoder: layer {} rotates with the local RoPE table, but local_rope_theta is not set", i);
  }
  build_rope_tables(device);
  set_init_rules();
  name_modules();
}

// The tables are data, not state: rebuilt from the config, never checkpointed.
void Decoder::build_rope_tables(Device device) {
  // Only the rotated features need angles (partial rotary: the first rotary_dim of each head).
  const int64_t rotary = config.layers.front().attention.rotary_size();
  const auto table = [&](double theta, const ops::RopeScaling& scaling) -> ops::RopeTable {
    if (!device.is_meta()) return ops::rope_table(rotary, config.max_seq_len, theta, scaling, device);
    return {Tensor::empty({config.max_seq_len, rotary / 2}, DType::f32, device),
            Tensor::empty({config.max_seq_len, rotary / 2}, DType::f32, device)};
  };
  rope = table(config.rope_theta, config.rope_scaling);
  if (config.local_rope_theta > 0) local_rope = table(config.local_rope_theta, {});
}

void Decoder::materialize(Device device) {
  to_empty(device);
  // Every buffer a decoder registers (MoE's expert bias and token counts) starts at zero.
  for (auto& [name, buffer] : named_buffers()) titan::fill_(*buffer, 0.0);
  build_rope_tables(device);
}

std::shared_ptr<nn::MoEAuxLoss> Decoder::new_aux_loss() const {
  for (const auto& layer : *layers) {
    if (layer->moe && layer->moe->config.aux_loss_coef > 0) {
      return std::make_shared<nn::MoEAuxLoss>(moe_layers_, layer->moe->config.num_experts,
                                              layer->moe->config.aux_loss_coef);
    }
  }
  return nullptr;
}

nn::BlockInputs Decoder::block_inputs(const DecoderInputs& inputs, const std::shared_ptr<nn::MoEAuxLoss>& aux) const {
  const Tensor& ids = inputs.input_ids;
  TITAN_CHECK(ids.dim() == 2, "Decoder: input_ids must be [batch, seq], got {}", shape_str(ids.shape()));
  TITAN_CHECK(ids.size(1) <= config.max_seq_len, "Decoder: sequence of {} exceeds max_seq_len {}", ids.size(1),
              config.max_seq_len);
  nn::BlockInputs block{attention_inputs(inputs.positions), aux};
  block.attention.mask.causal = true;
  block.attention.mask.document_ids = inputs.document_ids;
  return block;
}

nn::AttentionInputs Decoder::attention_inputs(const Tensor& positions) const {
  nn::AttentionInputs attention{&rope, positions, {}};
  if (local_rope.cos.defined()) attention.local_rope = &local_rope;
  return attention;
}

Tensor Decoder::embed(const Tensor& ids) const {
  Tensor h = tok_embeddings->forward(ids);
  if (config.embedding_norm_eps > 0) {
    // After the lookup's own reduction (tensor parallelism): the norm needs whole rows.
    h = F::rms_norm(h, Tensor::full({h.size(-1)}, 1.0, h.dtype(), h.device()),
                    static_cast<float>(config.embedding_norm_eps));
  }
  if (config.embedding_scale <= 0) return h;
  // Gemma multiplies by the scale rounded to the activations' dtype (its
  // "normalizer" tensor); F::scale rounds the product once.
  float factor = static_cast<float>(config.embedding_scale);
  if (h.dtype() == DType::bf16) factor = bf16_to_float(float_to_bf16(factor));
  return F::scale(h, factor);
}

Tensor Decoder::finish(const Tensor& h) const {
  const Tensor normed = norm->forward(h);
  return config.output_multiplier == 1.0 ? normed : F::scale(normed, static_cast<float>(config.output_multiplier));
}

Tensor Decoder::project_logits(const Tensor& hidden) const {
  const Tensor logits = F::linear(hidden, output_weight());
  return config.loss.softcap > 0 ? F::soft_cap(logits, config.loss.softcap) : logits;
}

Tensor Decoder::hidden_states(const DecoderInputs& inputs) const { return finish(trunk(inputs, nullptr)); }

Tensor Decoder::trunk(const DecoderInputs& inputs, const std::shared_ptr<nn::MoEAuxLoss>& aux) const {
  const nn::BlockInputs block = block_inputs(inputs, aux);
  Tensor h = embed(inputs.input_ids);
  for (const auto& layer : *layers) h = layer->forward(h, block);
  return h;
}

void Decoder::retain_modules(const std::vector<std::string>& module_fqns) {
  const auto kept = [&](const std::string& fqn) {
    return std::find(module_fqns.begin(), module_fqns.end(), fqn) != module_fqns.end();
  };
  std::vector<std::string> dropped_layers;
  for (size_t i = 0; i < layers->size(); ++i) {
    if (!kept("layers." + layers->key(i))) dropped_layers.push_back(layers->key(i));
  }
  for (const std::string& key : dropped_layers) layers->erase(key);
  // A tied output projection is the embedding table: it stays wherever the output is.
  if (tok_embeddings && !kept("tok_embeddings") && !(config.tie_embeddings && kept("norm"))) {
    remove_child("tok_embeddings");
    tok_embeddings = nullptr;
  }
  if (norm && !kept("norm")) {
    remove_child("norm");
    norm = nullptr;
  }
  if (output && !kept("output")) {
    remove_child("output");
    output = nullptr;
  }
}

Tensor Decoder::forward_part(const std::vector<std::string>& part, const Tensor& hidden,
                             const DecoderInputs& inputs) const {
  const ForwardScope scope(*this);
  const nn::BlockInputs block = block_inputs(inputs, nullptr);
  Tensor h = hidden;
  for (const std::string& fqn : part) {
    if (fqn == "tok_embeddings") {
      h = embed(inputs.input_ids);
    } else if (fqn.starts_with("layers.")) {
      const std::shared_ptr<nn::TransformerBlock> layer = layers->find(fqn.substr(7));
      TITAN_CHECK(layer != nullptr, "Decoder: this part holds no {}", fqn);
      h = layer->forward(h, block);
    } else if (fqn == "norm") {
      h = finish(h);
    } else {
      TITAN_CHECK(fqn == "output", "Decoder: no module '{}'", fqn);  // the loss applies it
    }
  }
  return h;
}

KVCache Decoder::make_cache(int64_t batch, int64_t capacity, DType dtype, int64_t head_split) const {
  TITAN_CHECK(capacity <= config.max_seq_len, "KV cache of {} positions exceeds max_seq_len {}", capacity,
              config.max_seq_len);
  KVCache cache;
  for (const nn::TransformerBlockConfig& layer : config.layers) {
    const nn::AttentionConfig& a = layer.attention;
    if (layer.delta_net) {
      // Gated DeltaNet: every position's pre-conv q | k | v (the short conv
      // reads the last K - 1) and the recurrent state, f32 as the op keeps it.
      // Under tensor parallelism each rank holds its heads' channels and states.
      const nn::GatedDeltaNetConfig& d = *layer.delta_net;
      TITAN_CHECK(head_split >= 1 && d.n_key_heads % head_split == 0,
                  "KV cache: {} Gated DeltaNet key heads do not split over {}", d.n_key_heads, head_split);
      cache.keys.push_back(Tensor::zeros({batch, capacity, d.conv_channels() / head_split}, dtype, rope.cos.device()));
      cache.values.push_back(Tensor::zeros({batch, d.n_value_heads / head_split, d.key_head_dim, d.value_head_dim},
                                           DType::f32, rope.cos.device()));
      continue;
    }
    if (layer.mla) {
      // Latent attention caches each position's normed latent and rotated
      // shared key, the same on every rank (tensor parallelism splits heads,
      // which the latents precede).
      cache.keys.push_back(Tensor::zeros({batch, capacity, layer.mla->kv_lora_rank}, dtype, rope.cos.device()));
      cache.values.push_back(Tensor::zeros({batch, capacity, layer.mla->qk_rope_head_dim}, dtype, rope.cos.device()));
      continue;
    }
    TITAN_CHECK(head_split >= 1 && a.kv_heads() % head_split == 0, "KV cache: {} key/value heads do not split over {}",
                a.kv_heads(), head_split);
    const Shape shape{batch, capacity, a.kv_heads() / head_split, a.head_size()};
    cache.keys.push_back(Tensor::zeros(shape, dtype, rope.cos.device()));
    cache.values.push_back(Tensor::zeros(shape, dtype, rope.cos.device()));
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
  const nn::AttentionInputs attention =
      attention_inputs(Tensor::from_vector(positions, {batch, tokens}).to(input_ids.device()));
  Tensor h = embed(input_ids);
  for (size_t i = 0; i < layers->size(); ++i) {
    h = (*layers)[i]->forward_cached(h, attention, cache.keys[i], cache.values[i], start);
  }
  cache.length = start + tokens;
  return project_logits(finish(h));
}

Tensor Decoder::output_weight() const {
  return config.tie_embeddings ? tok_embeddings->weight->materialize() : output->weight->materialize();
}

Tensor Decoder::logits(const DecoderInputs& inputs) const { return project_logits(hidden_states(inputs)); }

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

Tensor Decoder::loss(const DecoderInputs& inputs, const Tensor& labels, LossParts* parts) const {
  const ForwardScope scope(*this);
  const std::shared_ptr<nn::MoEAuxLoss> aux = new_aux_loss();
  // The hidden states first: the output weight's use is then recorded after
  // every block's, so backward reaches it right after the loss (autograd runs
  // the latest-recorded ready node first) and FSDP frees the output's
  // gathered weight and reduces its gradient then, not at the end of backward.
  const Tensor last = trunk(inputs, aux);
  const Tensor lm = loss_function(finish(last), output_weight(), labels);
  const Tensor mtp = mtp_layers ? mtp_loss(last, inputs, labels, aux) : Tensor();
  Tensor total = mtp.defined() ? F::add(lm, mtp) : lm;
  if (aux) {
    // The loss's own gradient (1, or 1 / micro-batches) reaches the observer before
    // any layer's backward runs, so the auxiliary gradient is scaled the same way.
    total = F::observe_gradient(total, [aux](const Tensor& gradient) { aux->set_upstream_gradient(gradient); });
  }
  if (parts != nullptr) {
    parts->lm = lm.detach();
    parts->mtp = mtp.defined() ? mtp.detach() : Tensor();
    parts->aux = aux ? aux->value() : Tensor();
  }
  return total;
}

namespace decoder_mtp {

// `values` [B, S] moved `shift` places left along the sequence, the last `shift` filled with `fill`.
Tensor shifted_left(const Tensor& values, int64_t shift, double fill) {
  Tensor out = Tensor::full(values.shape(), fill, values.dtype(), values.device());
  const int64_t kept = values.size(1) - shift;
  if (kept > 0) titan::copy_(out.narrow(1, 0, kept), values.narrow(1, shift, kept));
  return out;
}

// 1 / (the number of labels that are not -100), a 0-d f32 on the labels'
// device, without reading them on the host (the step may run under
// NoHostReadsScope or as a captured graph): labels are -100 or a token id, so
// sigmoid(label + 50) is 1 or (to f32's 2^-72) 0; the reciprocal comes from
// normalize_rows of [1, count - 1] (0 when nothing is counted).
Tensor inverse_target_count(const Tensor& labels) {
  const Tensor as_float = labels.to(DType::f32);
  const Tensor count =
      ops::sum(ops::sigmoid(ops::add(as_float, Tensor::full(as_float.shape(), 50.0, DType::f32, as_float.device()))));
  Tensor row = Tensor::full({1, 2}, 1.0, DType::f32, labels.device());
  titan::copy_(row.narrow(1, 1, 1),
               ops::sub(count, Tensor::full({}, 1.0, DType::f32, labels.device())).reshape({1, 1}));
  return ops::normalize_rows(row).narrow(1, 0, 1).reshape({});
}

}  // namespace decoder_mtp

Tensor Decoder::mtp_loss(const Tensor& last, const DecoderInputs& inputs, const Tensor& labels,
                         const std::shared_ptr<nn::MoEAuxLoss>& aux) const {
  TITAN_CHECK(!inputs.document_ids.defined(),
              "multi-token prediction (model.num_mtp_layers) with packed-document masking (model.document_masking) "
              "is not built: the shifted tokens would cross document boundaries");
  const nn::BlockInputs block = block_inputs(inputs, aux);
  const int64_t batch = labels.size(0), seq = labels.size(1);
  ops::CrossEntropyOptions options{
      .ignore_index = -100, .softcap = config.loss.softcap, .z_loss = config.loss.z_loss, .mean = false};
  const Tensor weight = output_weight();
  Tensor previous = last, sum;
  for (size_t k = 0; k < mtp_layers->size(); ++k) {
    const int64_t depth = static_cast<int64_t>(k) + 1;
    // Position i reads token i + depth; where that is past the sequence end
    // the token is 0 and the previous hidden state is zeroed (TorchTitan's roll_mtp_sequence).
    std::vector<float> valid(static_cast<size_t>(batch * seq));
    for (int64_t i = 0; i < batch * seq; ++i) valid[static_cast<size_t>(i)] = i % seq + depth < seq ? 1.0f : 0.0f;
    const Tensor mask = Tensor::from_vector(valid, {batch, seq, 1}).to(last.dtype()).to(last.device());
    const Tensor embedding = embed(decoder_mtp::shifted_left(inputs.input_ids, depth, 0.0));
    previous = (*mtp_layers)[k]->forward(embedding, previous, mask, block);
    const Tensor targets = decoder_mtp::shifted_left(labels, depth, -100.0).reshape({-1});
    const Tensor flat = F::reshape(previous, {-1, previous.size(-1)});
    Tensor depth_sum;
    if (config.loss.fused) {
      ops::FusedCrossEntropyOptions fused;
      fused.loss = options;
      fused.token_chunk = config.loss.token_chunk;
      fused.vocab_chunk = config.loss.vocab_chunk;
      depth_sum = F::fused_linear_cross_entropy(flat, weight, targets, fused);
    } else {
      depth_sum = F::cross_entropy(F::linear(flat, weight), targets, options);
    }
    sum = sum.defined() ? F::add(sum, depth_sum) : depth_sum;
  }
  // TorchTitan's weighting: each depth's sum over the main loss's target
  // count, averaged over depths, times mtp_scale.
  const Tensor factor = ops::scale(decoder_mtp::inverse_target_count(labels),
                                   static_cast<float>(config.loss.mtp_scale / static_cast<double>(mtp_layers->size())));
  return F::mul(sum, factor);
}

void Decoder::set_init_rules() {
  // A tied table is also the output projection: N(0, 1) rows would make the
  // first logits O(sqrt(dim)), so it takes the output layer's scale instead.
  const double output_std = 1.0 / std::sqrt(static_cast<double>(config.dim()));
  tok_embeddings->set_init(config.tie_embeddings ? output_std : 1.0);
  for (size_t i = 0; i < layers->size(); ++i) {
    (*layers)[i]->set_init(0.02 / std::sqrt(2.0 * static_cast<double>(i + 1)));
  }
  if (output) output->set_init(output_std, -3.0 * output_std, 3.0 * output_std);
  // TorchTitan builds each MTP depth from the last layer's config, its initialisation included.
  for (size_t k = 0; mtp_layers && k < mtp_layers->size(); ++k) {
    (*mtp_layers)[k]->set_init(0.02 / std::sqrt(2.0 * static_cast<double>(layers->size())));
  }
}

void Decoder::init_weights(const Generator& generator) { nn::initialize(*this, generator.seed()); }

}  // namespace titan::models
