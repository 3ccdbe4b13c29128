#include "titan/models/parallelize_decoder.h"

#include <algorithm>

#include "titan/nn/functional.h"
#include "titan/parallel/expert_parallel.h"
#include "titan/parallel/mixed_precision.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::models {
namespace {

using comm::ProcessGroup;

// Redistributions around a module whose weights are split over tp: its input
// gathered from the sequence shards, its partial output summed and scattered back.
void wrap_in_sequence_parallel(nn::Module& module, const std::shared_ptr<ProcessGroup>& tp) {
  module.input_hooks.push_back([tp](const Tensor& x) { return parallel::gather_sequence(x, tp); });
  module.output_hooks.push_back([tp](const Tensor& x) { return parallel::reduce_scatter_sequence(x, tp); });
}

// An adapter installed on the Linear (LoRA) splits with its base weight, so its output is laid out as the base's.
void split_adapter(const std::string& where, nn::Linear& linear, int64_t dim, const ProcessGroup& tp) {
  if (!linear.adapter()) return;
  for (const auto& [parameter, adapter_dim] : linear.adapter()->split_with_base(dim)) {
    parallel::shard_parameter(where + " (adapter)", *parameter, adapter_dim, tp);
  }
}

// A bias follows the weight's output rows: each rank adds its part to its own output columns.
void column_parallel(const std::string& where, nn::Linear& linear, const ProcessGroup& tp) {
  parallel::shard_parameter(where + " (column-parallel)", *linear.weight, 0, tp);
  if (linear.bias) parallel::shard_parameter(where + " (column-parallel bias)", *linear.bias, 0, tp);
  split_adapter(where, linear, 0, tp);
}

// Each rank's output is a partial sum, reduced after the module. A bias stays
// whole on every rank and is added once, after the reduction
// (add_bias_after_reduction): added by every rank before it, it would be
// counted tp times.
void row_parallel(const std::string& where, nn::Linear& linear, const ProcessGroup& tp) {
  parallel::shard_parameter(where + " (row-parallel)", *linear.weight, 1, tp);
  split_adapter(where, linear, 1, tp);
}

// The bias of the row-parallel `linear` whose output is `module`'s, added to
// the module's reduced output (Megatron's RowParallelLinear): install after
// the redistribution. Each rank's bias gradient sums its own tokens, and the
// trainer sums a replicated parameter's gradients over tp: the one-process
// gradient. Nothing may follow `linear` inside `module`.
void add_bias_after_reduction(nn::Module& module, nn::Linear& linear) {
  if (!linear.bias) return;
  linear.bias_added_outside = true;
  nn::Parameter* bias = linear.bias;
  module.output_hooks.push_back([bias](const Tensor& y) {
    const Tensor b = bias->materialize();  // the gathered, cast tensor under FSDP and mixed precision
    return F::add(y, F::expand(F::reshape(b, {1, 1, b.size(0)}), y.shape()));
  });
}

// A norm over a whole q/k projection (OLMo 2) needs every head, and each rank
// holds only its own: the norm's input is gathered along the features (the
// backward sums each rank's part of the gradient), the norm runs on the whole
// projection with its whole weight on every rank, and each rank keeps its own
// heads' features. The weight stays replicated: each rank's gradient covers
// only its features, and the trainer sums replicated gradients over tp.
void gather_heads_around(nn::RMSNorm& norm, const std::shared_ptr<ProcessGroup>& tp) {
  norm.input_hooks.push_back([tp](const Tensor& x) {
    // x [B, S, features / tp]: gather_sequence gathers dim 1, so the features go there and back.
    const Tensor gathered = parallel::gather_sequence(F::contiguous(F::transpose(x, 1, 2)), tp);
    return F::contiguous(F::transpose(gathered, 1, 2));
  });
  norm.output_hooks.push_back([tp](const Tensor& y) {
    const int64_t local = y.size(2) / tp->size();
    return F::narrow(y, 2, tp->rank() * local, local);
  });
}

// Around a split module for generation (no sequence parallelism): its input
// is whole on every rank; its partial outputs are summed over tp.
void wrap_in_partial_sum(nn::Module& module, const std::shared_ptr<ProcessGroup>& tp) {
  module.output_hooks.push_back([tp](const Tensor& x) { return parallel::sum_partial_outputs(x, *tp); });
}

// How a split module's input and output are laid out between blocks.
using Redistribution = void (*)(nn::Module&, const std::shared_ptr<ProcessGroup>&);

// ---- the plan by module kind ----

void tensor_parallel_attention(const std::string& where, nn::Attention& attention,
                               const std::shared_ptr<ProcessGroup>& tp, Redistribution around) {
  const nn::AttentionConfig& a = attention.config;
  TITAN_CHECK(a.n_heads % tp->size() == 0 && a.kv_heads() % tp->size() == 0,
              "tensor parallelism: {} has {} query / {} key-value heads, which do not split over {} ranks", where,
              a.n_heads, a.kv_heads(), tp->size());
  for (nn::Linear* linear : {attention.wq.get(), attention.wk.get(), attention.wv.get()}) {
    column_parallel(where, *linear, *tp);
  }
  // The output gate multiplies each head's output: split by heads, as wq.
  if (attention.o_gate) column_parallel(where, *attention.o_gate, *tp);
  // One sink logit per query head: each rank keeps its heads' (gpt-oss).
  if (attention.sinks) parallel::shard_parameter(where + " (sinks)", *attention.sinks, 0, *tp);
  row_parallel(where, *attention.wo, *tp);
  around(attention, tp);
  add_bias_after_reduction(attention, *attention.wo);
  if (a.qk_norm && a.qk_norm_whole_projection) {
    for (nn::RMSNorm* norm : {attention.q_norm.get(), attention.k_norm.get()}) gather_heads_around(*norm, tp);
  }
}

// Latent attention splits by heads: the projections to heads (wq or wq_b,
// and wkv_b, whose rows are each head's key and value features) column-wise,
// wo row-wise. The low-rank projections before them and their norms stay
// replicated: every rank computes the whole latent (the trainer sums their
// gradients, each rank's covering its heads, over tp).
void tensor_parallel_latent_attention(const std::string& where, nn::MlaAttention& attention,
                                      const std::shared_ptr<ProcessGroup>& tp, Redistribution around) {
  TITAN_CHECK(attention.attention.n_heads % tp->size() == 0,
              "tensor parallelism: {} has {} heads, which do not split over {} ranks", where,
              attention.attention.n_heads, tp->size());
  column_parallel(where, attention.wq ? *attention.wq : *attention.wq_b, *tp);
  column_parallel(where, *attention.wkv_b, *tp);
  row_parallel(where, *attention.wo, *tp);
  around(attention, tp);
  add_bias_after_reduction(attention, *attention.wo);
}

// Gated DeltaNet splits by heads (TorchTitan's qwen3_5 plan): the
// projections to q, k, v, z and the per-head gate inputs a, b column-wise,
// each head's conv channels, A_log and dt_bias with them, out_proj row-wise.
// A rank's value heads read its own key heads: with both counts split evenly,
// value head h still reads key head h / (Hv / Hk). The norm's weight (one per
// value feature, shared by the heads) stays replicated.
void tensor_parallel_delta_net(const std::string& where, nn::GatedDeltaNet& net,
                               const std::shared_ptr<ProcessGroup>& tp, Redistribution around) {
  TITAN_CHECK(net.config.n_key_heads % tp->size() == 0,
              "tensor parallelism: {} has {} key heads ({} value heads), which do not split over {} ranks", where,
              net.config.n_key_heads, net.config.n_value_heads, tp->size());
  for (nn::Linear* linear : {net.in_proj_q.get(), net.in_proj_k.get(), net.in_proj_v.get(), net.in_proj_z.get(),
                             net.in_proj_a.get(), net.in_proj_b.get()}) {
    if (linear) column_parallel(where, *linear, *tp);
  }
  for (nn::Parameter* per_head : {net.conv_q, net.conv_k, net.conv_v, net.a_log, net.dt_bias}) {
    if (per_head) parallel::shard_parameter(where + " (per head)", *per_head, 0, *tp);
  }
  row_parallel(where, *net.out_proj, *tp);
  net.split_heads(tp->size());
  around(net, tp);
  add_bias_after_reduction(net, *net.out_proj);
}

void tensor_parallel_feed_forward(const std::string& where, nn::FeedForward& ffn,
                                  const std::shared_ptr<ProcessGroup>& tp, Redistribution around) {
  TITAN_CHECK(ffn.config.hidden_dim % tp->size() == 0,
              "tensor parallelism: {} has an FFN of {} which does not split over {} ranks", where,
              ffn.config.hidden_dim, tp->size());
  column_parallel(where, *ffn.w1, *tp);
  column_parallel(where, *ffn.w3, *tp);
  row_parallel(where, *ffn.w2, *tp);
  around(ffn, tp);
  add_bias_after_reduction(ffn, *ffn.w2);
}

// The output projection split by vocabulary rows, with a loss that combines
// the ranks' slices without ever gathering the logits.
void tensor_parallel_output(Decoder& model, const std::shared_ptr<ProcessGroup>& tp) {
  const int64_t vocab = model.config.vocab_size;
  TITAN_CHECK(vocab % tp->size() == 0, "tensor parallelism: vocabulary {} does not split over {} ranks", vocab,
              tp->size());
  if (model.output) parallel::shard_parameter("output.weight", *model.output->weight, 0, *tp);
  const LossConfig loss = model.config.loss;
  model.loss_function = [tp, loss, vocab](const Tensor& hidden, const Tensor& weight, const Tensor& labels) {
    const Tensor full = parallel::gather_sequence(hidden, tp);
    ops::FusedCrossEntropyOptions options;
    options.loss = {.ignore_index = -100, .softcap = loss.softcap, .z_loss = loss.z_loss};
    options.token_chunk = loss.token_chunk;
    options.vocab_chunk = loss.vocab_chunk;
    return parallel::vocab_parallel_cross_entropy(F::reshape(full, {-1, full.size(-1)}), weight, labels.reshape({-1}),
                                                  vocab, options, tp);
  };
}

// Every block in the order training runs them, by FQN: the layers, then the
// multi-token prediction depths (ordinary blocks with their fusion around them, nn::MtpBlock).
std::vector<std::pair<std::string, nn::TransformerBlock*>> training_blocks(const Decoder& model) {
  std::vector<std::pair<std::string, nn::TransformerBlock*>> blocks;
  for (size_t i = 0; i < model.layers->size(); ++i)
    blocks.emplace_back("layers." + model.layers->key(i), (*model.layers)[i].get());
  for (size_t k = 0; model.mtp_layers && k < model.mtp_layers->size(); ++k) {
    blocks.emplace_back("mtp_layers." + model.mtp_layers->key(k), (*model.mtp_layers)[k].get());
  }
  return blocks;
}

std::vector<nn::Block*> blocks_of(const Decoder& model) {
  std::vector<nn::Block*> blocks;
  for (const auto& [where, block] : training_blocks(model)) blocks.push_back(block);
  return blocks;
}

// One FSDP unit per block, one for the embedding table (freed after the
// lookup) and one for the final norm and output (kept from their forward until
// their gradients are in), as TorchTitan wraps them. Apply after
// activation checkpointing, so the gather wraps the checkpointed block.
// Experts split by expert parallelism get units of their own, sharded over
// the ranks that hold the same experts (dp_shard_mod_ep x cp), gathered and
// freed with their block's. Multi-token prediction depths are blocks after
// the last layer; generation (`with_mtp` false) never runs them and leaves
// them whole and unwrapped.
std::shared_ptr<parallel::Fsdp> apply_fsdp(Decoder& model, const comm::DeviceMesh& mesh,
                                           const ParallelizeOptions& options, bool with_mtp = true) {
  // Context-parallel ranks hold the same parameters and see different tokens: they shard with dp_shard.
  auto fsdp =
      std::make_shared<parallel::Fsdp>(mesh.group(comm::MeshDim::dp_shard_cp), mesh.group(comm::MeshDim::dp_replicate),
                                       parallel::FsdpOptions{options.param_dtype, options.reshard_after_forward,
                                                             options.device, options.precompute_float8_scales});
  // The embedding table is a unit of its own, freed once the lookup is done
  // (its backward scatters the output gradient and needs no weights); tied to
  // the output projection, it goes with the output, needed again by the loss.
  if (model.tok_embeddings && !model.config.tie_embeddings) {
    const size_t unit = fsdp->add_unit("tok_embeddings", {model.tok_embeddings->weight});
    if (options.reshard_after_forward != parallel::ReshardPolicy::never) {
      fsdp->reshard_after_forward(*model.tok_embeddings, unit);
    }
  }
  std::vector<nn::Parameter*> norm_and_output;
  for (auto& [name, parameter] : model.named_parameters()) {
    const bool own_unit = name.starts_with("tok_embeddings.") && !model.config.tie_embeddings;
    if (!name.starts_with("layers.") && !name.starts_with("mtp_layers.") && !own_unit) {
      norm_and_output.push_back(parameter);
    }
  }
  // A middle pipeline stage has no norm or output.
  if (!norm_and_output.empty()) fsdp->add_unit("norm, output", norm_and_output);
  std::vector<std::pair<std::string, nn::TransformerBlock*>> blocks = training_blocks(model);
  if (!with_mtp) blocks.resize(model.layers->size());
  const size_t layers = blocks.size();
  // An expert's gradient sums the tokens every ep rank sent it: 1 / ep makes it the data-parallel mean.
  const float expert_scale = 1.0f / static_cast<float>(mesh.size(comm::MeshDim::ep));
  for (size_t i = 0; i < layers; ++i) {
    nn::TransformerBlock& block = *blocks[i].second;
    const std::string& where = blocks[i].first;
    std::vector<nn::Parameter*> parameters, experts;
    for (auto& [name, parameter] : block.named_parameters()) {
      (parameter->expert_parallel ? experts : parameters).push_back(parameter);
    }
    std::vector<size_t> units{fsdp->add_unit(where, parameters)};
    if (!experts.empty()) {
      units.push_back(
          fsdp->add_unit(where + ".moe.experts", experts, mesh.group(comm::MeshDim::dp_shard_mod_ep_cp), expert_scale));
    }
    // The last block's backward comes right after its forward: keep it gathered unless told to always reshard.
    const bool reshard = options.reshard_after_forward == parallel::ReshardPolicy::always ||
                         (options.reshard_after_forward == parallel::ReshardPolicy::default_policy && i + 1 < layers);
    fsdp->wrap_block(block, units, reshard);
  }
  return fsdp;
}

// Every MoE layer's experts split over the ep group.
void apply_expert_parallel(Decoder& model, const comm::DeviceMesh& mesh) {
  const std::shared_ptr<ProcessGroup>& ep = mesh.group(comm::MeshDim::ep);
  if (ep->size() == 1) return;
  // The config, not the layers held: a pipeline stage may hold only dense ones.
  const auto& configs = model.config.layers;
  TITAN_CHECK(std::any_of(configs.begin(), configs.end(), [](const auto& layer) { return layer.moe.has_value(); }),
              "parallelism.expert_parallel_degree {}: this model has no mixture-of-experts layers", ep->size());
  for (const auto& [where, block] : training_blocks(model)) {
    if (block->moe) parallel::apply_expert_parallel(where + ".moe", *block->moe, ep);
  }
}

// Every attention layer computes ring attention over cp on its slice of the sequence.
std::shared_ptr<parallel::RingAttention> apply_context_parallel(Decoder& model, const comm::DeviceMesh& mesh,
                                                                const ParallelizeOptions& options) {
  const std::shared_ptr<ProcessGroup>& cp = mesh.group(comm::MeshDim::cp);
  if (cp->size() == 1) return nullptr;
  auto ring = std::make_shared<parallel::RingAttention>(cp, options.context_parallel_rotate,
                                                        options.context_parallel_load_balance);
  for (size_t i = 0; i < model.layers->size(); ++i) {
    nn::TransformerBlock& block = *(*model.layers)[i];
    TITAN_CHECK(!block.linear_attention,
                "context parallelism: layers.{}.attention is a Gated DeltaNet linear-attention layer (qwen3_5); "
                "splitting its recurrence over the sequence is not built (set context_parallel_degree = 1)",
                model.layers->key(i));
    const std::string& impl = block.config.attention.attention_impl;
    TITAN_CHECK(impl == "flash",
                "context parallelism: layers.{}.attention uses the {} attention kernel; ring attention computes "
                "with flash attention's chunk kernels (model.attention = \"flash\")",
                model.layers->key(i), impl);
    const nn::AttentionCore core = [ring](const Tensor& q, const Tensor& k, const Tensor& v,
                                          const ops::AttentionMask& mask,
                                          float scale) { return (*ring)(q, k, v, mask, scale); };
    if (block.latent_attention) {
      block.latent_attention->set_core(core);
    } else {
      block.attention->set_core(core);
    }
  }
  return ring;
}

// Every block's attention and dense FFN split over tp, `around` laying out
// their inputs and outputs.
void split_blocks(Decoder& model, const std::shared_ptr<ProcessGroup>& tp, Redistribution around) {
  for (size_t i = 0; i < model.layers->size(); ++i) {
    nn::TransformerBlock& block = *(*model.layers)[i];
    const std::string where = "layers." + model.layers->key(i);
    if (block.linear_attention) {
      tensor_parallel_delta_net(where + ".attention", *block.linear_attention, tp, around);
    } else if (block.latent_attention) {
      tensor_parallel_latent_attention(where + ".attention", *block.latent_attention, tp, around);
    } else {
      tensor_parallel_attention(where + ".attention", *block.attention, tp, around);
    }
    if (block.feed_forward) tensor_parallel_feed_forward(where + ".feed_forward", *block.feed_forward, tp, around);
  }
}

}  // namespace

void apply_tensor_parallel(Decoder& model, const comm::DeviceMesh& mesh) {
  const std::shared_ptr<ProcessGroup>& tp = mesh.group(comm::MeshDim::tp);
  if (tp->size() == 1) return;
  split_blocks(model, tp, wrap_in_sequence_parallel);
  // The table split by vocabulary rows; the lookup leaves each rank its part
  // of the sequence, and the residual stream stays split until the loss.
  if (model.tok_embeddings) {
    TITAN_CHECK(model.config.vocab_size % tp->size() == 0,
                "tensor parallelism: vocabulary {} does not split over {} ranks", model.config.vocab_size, tp->size());
    parallel::shard_parameter("tok_embeddings.weight", *model.tok_embeddings->weight, 0, *tp);
    model.tok_embeddings->set_lookup(
        [tp](const Tensor& weight, const Tensor& ids) { return parallel::vocab_parallel_embedding(weight, ids, tp); });
  }
  tensor_parallel_output(model, tp);
}

parallel::ParallelizedModel parallelize_decoder(Decoder& model, const comm::DeviceMesh& mesh,
                                                const ParallelizeOptions& options_in) {
  ParallelizeOptions options = options_in;
  if (model.mtp_layers) {
    // TorchTitan refuses the same two (MTP.md): the shifted tokens and labels
    // would need the neighbouring ranks' positions, the depths the last stage.
    const char* refused = options.pipelined                  ? "pipeline parallelism"
                          : mesh.size(comm::MeshDim::cp) > 1 ? "context parallelism"
                          : mesh.size(comm::MeshDim::tp) > 1 ? "tensor parallelism"
                                                             : nullptr;
    TITAN_CHECK(refused == nullptr,
                "multi-token prediction (model.num_mtp_layers = {}) with {} is not built; set model.num_mtp_layers "
                "= 0 or train with FSDP / expert parallelism only",
                model.mtp_layers->size(), refused);
  }
  if (options.pipelined && options.reshard_after_forward == parallel::ReshardPolicy::default_policy) {
    options.reshard_after_forward = parallel::ReshardPolicy::never;
  }
  apply_tensor_parallel(model, mesh);
  apply_expert_parallel(model, mesh);
  parallel::ParallelizedModel parallelized(mesh, options.pipelined);
  parallelized.ring_attention = apply_context_parallel(model, mesh, options);
  parallel::apply_activation_checkpointing(blocks_of(model), options.activation_checkpoint, options.selective_every,
                                           options.selective_ops);
  if (mesh.dims().dp() * mesh.dims().cp > 1) {
    parallelized.fsdp = apply_fsdp(model, mesh, options);
    // Under pipelining, resharding after every forward goes with reducing
    // each micro-batch's gradients: the stage's units are neither held
    // gathered nor their f32 gradients held whole through the step.
    if (options.pipelined) {
      parallelized.fsdp->set_reduce_in_backward(options.reshard_after_forward == parallel::ReshardPolicy::always);
    }
  } else {
    parallel::apply_mixed_precision(model, options.param_dtype);
  }
  return parallelized;
}

parallel::ParallelizedModel parallelize_decoder_for_generation(Decoder& model, const comm::DeviceMesh& mesh) {
  const comm::ParallelDims& dims = mesh.dims();
  TITAN_CHECK(dims.pp == 1 && dims.cp == 1 && dims.ep == 1 && dims.dp_replicate == 1,
              "generation on a mesh: tensor parallelism and FSDP sharding only (got pp {}, cp {}, ep {}, "
              "dp_replicate {})",
              dims.pp, dims.cp, dims.ep, dims.dp_replicate);
  const std::shared_ptr<ProcessGroup>& tp = mesh.group(comm::MeshDim::tp);
  if (tp->size() > 1) split_blocks(model, tp, wrap_in_partial_sum);
  parallel::ParallelizedModel parallelized(mesh, /*pipelined=*/false);
  if (dims.dp_shard > 1) {
    ParallelizeOptions options;
    options.param_dtype = DType::f32;  // what one process generates with
    options.reshard_after_forward = parallel::ReshardPolicy::always;
    parallelized.fsdp = apply_fsdp(model, mesh, options, /*with_mtp=*/false);
  }
  return parallelized;
}

}  // namespace titan::models
