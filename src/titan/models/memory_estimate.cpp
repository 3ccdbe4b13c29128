#include "titan/models/memory_estimate.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "titan/core/units.h"

namespace titan::models {
namespace {

// Elements one block keeps for backward, from what its functions save:
//   norms: their inputs x and h            2 BSD (+ f32 rstd, negligible)
//   q/k/v linears: normed input            BSD
//   attention: q, k, v and output          BS (2 Hq + 2 Hkv) Dh (+ f32 lse)
//   output gate: sigmoid's output and the gated output  2 BS Hq Dh
//   dense FFN: w1/w3 input BSD, swiglu's gate and up, w2's input  BSD + 3 BSF
//   MoE FFN: the normed input BSD, router scores BSE (f32, counted as 2
//            elements each), and per routed row (BSk of them) its permuted
//            input D, gate, up and hidden 3H, and its output D for the combine;
//            shared experts as a dense FFN.
// Latent attention per token: the low-rank query and its norm, the query,
// its rotated part and the joined query; the latent (with the shared key),
// its norm, wkv_b's output, the joined keys and the values; the q/k/v the
// kernel sees (padded to one head width) and its output.
double latent_attention_elements(const nn::TransformerBlockConfig& block) {
  const nn::MlaConfig& m = *block.mla;
  const int64_t heads = block.attention.n_heads, width = std::max(m.qk_head_dim(), m.v_head_dim);
  return static_cast<double>(
      2 * m.q_lora_rank + heads * (2 * m.qk_head_dim() + m.qk_rope_head_dim) + 2 * m.kv_lora_rank + m.qk_rope_head_dim +
      heads * (m.qk_nope_head_dim + m.v_head_dim + m.qk_head_dim() + m.v_head_dim) + 4 * heads * width);
}

double block_activation_elements(const nn::TransformerBlockConfig& block, int64_t batch, int64_t seq) {
  const auto& a = block.attention;
  const double tokens = static_cast<double>(batch * seq);
  const double dim = static_cast<double>(a.dim);
  const double attention =
      block.mla ? latent_attention_elements(block)
                : static_cast<double>((2 * a.n_heads + 2 * a.kv_heads() + (a.output_gate ? 2 * a.n_heads : 0)) *
                                      a.head_size());
  double ffn = dim + 3.0 * static_cast<double>(block.feed_forward.hidden_dim);
  if (block.moe) {
    const nn::MoEConfig& moe = *block.moe;
    const double routed = static_cast<double>(moe.top_k) * (2.0 * dim + 3.0 * static_cast<double>(moe.hidden_dim));
    const double shared =
        moe.num_shared_experts > 0 ? 3.0 * static_cast<double>(moe.num_shared_experts * moe.hidden_dim) : 0.0;
    ffn = dim + 2.0 * static_cast<double>(moe.num_experts) + routed + shared;
  }
  return tokens * (3.0 * dim + attention + ffn);
}

// Elements one block's backward holds beyond what it saved, at its widest:
// the FFN's, the gradients of its hidden activations (w2's input, the gate and
// the up projection) for every row it computes, routed or shared.
double block_backward_transient_elements(const nn::TransformerBlockConfig& block, int64_t batch, int64_t seq) {
  const double tokens = static_cast<double>(batch * seq);
  if (!block.moe) return tokens * 3.0 * static_cast<double>(block.feed_forward.hidden_dim);
  const nn::MoEConfig& moe = *block.moe;
  return tokens * 3.0 * static_cast<double>(moe.top_k * moe.hidden_dim + moe.num_shared_experts * moe.hidden_dim);
}

// Elements the per-op policy keeps from one block (autograd/saved_ops.h):
// its matmuls run wq, wk, wv, wo, then the dense FFN's w3, w1, w2 (a MoE
// layer's router gate is always recomputed, its experts' grouped GEMMs are not
// matmuls, its shared experts run as a dense FFN), and the 1st, 3rd, ... are
// kept: q, v, the FFN's up projection and its output; and attention's output
// and log-sum-exp (f32, counted as two elements). With LoRA the adapters'
// matmuls shift the count; this is the base model's.
double kept_op_elements(const nn::TransformerBlockConfig& block, int64_t batch, int64_t seq) {
  const auto& a = block.attention;
  const double tokens = static_cast<double>(batch * seq);
  double elements = static_cast<double>((2 * a.n_heads + a.kv_heads()) * a.head_size() + 2 * a.n_heads);
  const bool dense = !block.moe;
  const int64_t ffn_hidden =
      dense ? block.feed_forward.hidden_dim
            : (block.moe->num_shared_experts > 0 ? block.moe->num_shared_experts * block.moe->hidden_dim : 0);
  if (ffn_hidden > 0) elements += static_cast<double>(ffn_hidden + a.dim);
  return tokens * elements;
}

}  // namespace

namespace {

// Bytes one micro-batch leaves saved for backward in `layers` under the
// activation checkpointing mode; `extra_per_token[i]` elements per token more
// in layer i (LoRA's adapters).
double saved_activation_bytes(const DecoderConfig& config, const MemoryEstimateOptions& o,
                              const std::vector<int64_t>& layers, const std::vector<double>& extra_per_token) {
  const double compute_size = static_cast<double>(dtype_size(o.compute_dtype));
  const auto block_bytes = [&](int64_t i) {
    double extra = extra_per_token[static_cast<size_t>(i)] * static_cast<double>(o.batch * o.seq_len);
    if (o.naive_attention) {
      const auto& a = config.layers[static_cast<size_t>(i)].attention;
      extra +=
          static_cast<double>(o.batch * a.n_heads) * static_cast<double>(o.seq_len) * static_cast<double>(o.seq_len);
    }
    return (block_activation_elements(config.layers[static_cast<size_t>(i)], o.batch, o.seq_len) + extra) *
           compute_size;
  };
  double all_blocks = 0.0, largest_block = 0.0;
  for (int64_t i : layers) {
    all_blocks += block_bytes(i);
    largest_block = std::max(largest_block, block_bytes(i));
  }
  if (o.activation_checkpoint == "offload") {
    // On the device: the last block (kept), one being copied out during
    // forward, and one being copied back during backward.
    return std::min(3.0, static_cast<double>(layers.size())) * largest_block;
  }
  if (o.activation_checkpoint == "none") return all_blocks;
  // Checkpointed blocks keep their input; one of them is recomputed whole during backward.
  const double block_input = static_cast<double>(o.batch * o.seq_len * config.dim()) * compute_size;
  double kept = 0.0;
  bool any_checkpointed = false;
  const bool per_op = o.activation_checkpoint == "selective" && o.selective_ops;
  for (int64_t i : layers) {
    const bool recomputed = o.activation_checkpoint == "full" || per_op || i % o.selective_every == 0;
    kept += recomputed ? block_input : block_bytes(i);
    if (per_op) {
      kept += kept_op_elements(config.layers[static_cast<size_t>(i)], o.batch, o.seq_len) * compute_size;
    }
    any_checkpointed = any_checkpointed || recomputed;
  }
  return kept + (any_checkpointed ? largest_block : 0.0);
}

// LoRA's adapters: r (in + out) parameters per adapted [out, in] weight of
// each layer, and per token the r-wide projection each keeps for backward
// (with dropout also its dropped input, `in` wide).
struct LoraShape {
  std::vector<int64_t> parameters;         // per layer
  std::vector<double> elements_per_token;  // per layer
};

LoraShape lora_shape(Decoder& model, const DecoderConfig& config, const MemoryEstimateOptions& o) {
  LoraShape lora{std::vector<int64_t>(static_cast<size_t>(config.n_layers()), 0),
                 std::vector<double>(static_cast<size_t>(config.n_layers()), 0.0)};
  if (o.lora_rank <= 0) return lora;
  std::map<std::string, Shape> shapes;
  for (auto& [name, parameter] : model.named_parameters()) shapes[name] = parameter->data.shape();
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    for (const std::string& module : o.lora_modules) {
      const auto found = shapes.find(fmt::format("layers.{}.{}.weight", i, module));
      if (found == shapes.end() || found->second.size() != 2) continue;  // e.g. feed_forward.w1 of a MoE layer
      const int64_t out = found->second[0], in = found->second[1];
      lora.parameters[static_cast<size_t>(i)] += o.lora_rank * (in + out);
      lora.elements_per_token[static_cast<size_t>(i)] +=
          static_cast<double>(o.lora_rank) + (o.lora_dropout ? static_cast<double>(in) : 0.0);
    }
  }
  return lora;
}

std::vector<int64_t> layer_indices(const std::vector<std::string>& modules) {
  std::vector<int64_t> layers;
  for (const std::string& fqn : modules) {
    if (fqn.starts_with("layers.")) layers.push_back(std::stoll(fqn.substr(7)));
  }
  return layers;
}

// Ring attention's buffers for the largest layer, beyond what the layer saves:
// its f32 output and dq accumulators for the rank's queries, and the keys and
// values of other ranks with their f32 gradients. allgather holds every
// rank's K/V (the whole sequence) and, in backward, f32 gradients for all of
// them plus their stacked copy for the reduce-scatter; alltoall holds two
// ranks' K/V (the current and the incoming) and three f32 gradient buffers
// (this rank's sum, the one arriving, the one being sent).
double ring_attention_bytes(const DecoderConfig& config, const MemoryEstimateOptions& o) {
  if (o.cp <= 1) return 0.0;
  double largest = 0.0;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    const nn::AttentionConfig& a = block.attention;
    const int64_t local_seq = o.seq_len / o.cp;  // each rank's slice (the sequence divides into 2 cp chunks)
    const double local = static_cast<double>(o.batch * local_seq);
    const double queries = local * static_cast<double>(a.n_heads * a.head_size());
    const double kv_per_rank = 2.0 * local * static_cast<double>(a.kv_heads() * a.head_size());
    const double compute_size = static_cast<double>(dtype_size(o.compute_dtype));
    const double ranks = static_cast<double>(o.cp);
    const double kv = o.cp_rotate_method == "alltoall" ? kv_per_rank * (2.0 * compute_size + 3.0 * 4.0)
                                                       : kv_per_rank * ranks * (compute_size + 2.0 * 4.0);
    largest = std::max(largest, 2.0 * 4.0 * queries + kv);
  }
  return largest;
}

bool is_moe(const std::string& name) { return name.find(".moe.") != std::string::npos; }
bool is_expert(const std::string& name) { return name.find(".moe.experts.") != std::string::npos; }

// What divides a parameter once gathered: tp, except for MoE layers (whole on
// every tp rank), whose experts divide by ep.
int64_t split_by(const std::string& name, int64_t tp, int64_t ep) {
  if (!is_moe(name)) return tp;
  return is_expert(name) ? ep : 1;
}

// FSDP's unsharded buffers (parallel/fsdp.cpp) at the three peaks of a step:
//  - at_loss, the loss's backward: the norm and output unit gathered in the
//    compute dtype since their forward with its f32 gradient bucket filling,
//    and the last block, kept gathered for its backward;
//  - in_blocks, a block's backward: it and the one before (prefetched)
//    gathered, the latter's all-gather buffers, and its f32 bucket filling
//    beside the previous block's, whose reduce-scatter is in flight (one at
//    a time) with its ring's buffers;
//  - at_end, the embedding's backward, the last: its gradient in the compute
//    dtype (cast from an f32 scatter) and then its f32 bucket, beside the
//    first block's unit and bucket, whose reduce-scatter is in flight. The
//    table itself was freed after the lookup (kept gathered when tied to
//    the output).
// Under pipelining (UnitLifetime) the stage's units may be held longer.
struct FsdpUnitBytes {
  double at_loss = 0.0, in_blocks = 0.0, at_end = 0.0;  // see fsdp_unit_bytes
  // Of in_blocks: a reduce-scatter in flight, from the second block's
  // backward on (stage_all_step: after the step's last backward).
  double reduction = 0.0;
  double buckets = 0.0;  // stage_all_step: of every moment, the f32 gradient buckets, made by the first backward
  double largest() const { return std::max({at_loss, in_blocks, at_end}); }
};

// How long a unit stays gathered.
enum class UnitLifetime {
  // Around its block's forward and backward (no pipelining, or pipelining
  // resharding after forward with whole backwards).
  per_block,
  // All step, its f32 gradient summing the micro-batches (pipelining's default).
  stage_all_step,
  // Pipelining resharding after forward with a split backward: from a
  // micro-batch's input half until its weight half, so the stage's blocks
  // (in the compute dtype), with up to two f32 buckets filling at a time.
  stage_until_weight_backward,
};

// `frozen_base`: LoRA, whose base weights are gathered but have no place in
// the gradient buckets (the adapters' are negligible).
FsdpUnitBytes fsdp_unit_bytes(Decoder& model, const std::vector<int64_t>& held_layers, double compute_size,
                              UnitLifetime lifetime, bool frozen_base, int64_t tp, int64_t ep, int64_t dp_shard) {
  double output_side = 0.0, embedding = 0.0;
  std::map<int64_t, double> layer_elements;
  const bool own_embedding_unit = !model.config.tie_embeddings && lifetime != UnitLifetime::stage_all_step;
  for (auto& [name, parameter] : model.named_parameters()) {
    const double elements = static_cast<double>(parameter->data.numel()) / static_cast<double>(split_by(name, tp, ep));
    if (name.starts_with("layers.")) {
      layer_elements[std::stoll(name.substr(7))] += elements;  // with its experts' unit, gathered and freed with it
    } else if (own_embedding_unit && name.starts_with("tok_embeddings.")) {
      embedding += elements;
    } else {
      output_side += elements;
    }
  }
  double largest_layer = 0.0, all_layers = 0.0;
  for (int64_t i : held_layers) {
    largest_layer = std::max(largest_layer, layer_elements[i]);
    all_layers += layer_elements[i];
  }
  const double gradient_size = frozen_base ? 0.0 : 4.0;
  const double unit_size = compute_size + gradient_size;
  // A reduce-scatter in flight passes two shards of f32 around its ring
  // (comm/mpi_process_group.cpp) into a third, the unit's shard gradients.
  const double shards = static_cast<double>(dp_shard);
  const double reduction_in_flight = 3.0 * gradient_size * largest_layer / shards;
  if (lifetime == UnitLifetime::stage_all_step) {
    const double all = (output_side + all_layers) * unit_size + reduction_in_flight;
    return {all, all, all, reduction_in_flight, (output_side + all_layers) * gradient_size};
  }
  // An all-gather lands in a buffer of its own (copied into place when the
  // block runs) from this rank's shard, packed to send.
  const double gathering = largest_layer * compute_size * (1.0 + 1.0 / shards);
  if (lifetime == UnitLifetime::stage_until_weight_backward) {
    // (A block gathered again for one micro-batch's input half while its
    // reduction of another's weight half is in flight.)
    const double all = (output_side + all_layers) * compute_size +
                       std::min(2.0, static_cast<double>(held_layers.size())) * largest_layer * gradient_size +
                       gathering + reduction_in_flight;
    return {all, all, all};
  }
  const double blocks_in_flight = std::min(2.0, static_cast<double>(held_layers.size()));
  const double prefetch = blocks_in_flight > 1.0 ? gathering : 0.0;
  return {output_side * unit_size + largest_layer * compute_size,
          blocks_in_flight * largest_layer * unit_size + prefetch + reduction_in_flight,
          (frozen_base ? 0.0 : embedding * unit_size) + largest_layer * unit_size + reduction_in_flight,
          reduction_in_flight};
}

}  // namespace

std::vector<std::string> PipelinePlacement::held_modules() const {
  std::vector<std::string> held;
  for (int stage : schedule.stages_of(rank)) {
    const std::vector<std::string>& part = parts[static_cast<size_t>(stage)];
    held.insert(held.end(), part.begin(), part.end());
  }
  return held;
}

MemoryEstimate estimate_memory(const DecoderConfig& config, const MemoryEstimateOptions& options) {
  TITAN_CHECK(options.cp >= 1 && options.seq_len % options.cp == 0,
              "memory estimate: a sequence of {} tokens does not split over {} context-parallel ranks", options.seq_len,
              options.cp);
  // A context-parallel rank is a rank training on seq_len / cp tokens whose parameters shard over dp_shard x cp.
  MemoryEstimateOptions o = options;
  o.seq_len = options.seq_len / options.cp;
  o.dp_shard = options.dp_shard * options.cp;
  MemoryEstimate e;
  const std::shared_ptr<Decoder> model = config.build(Device::meta());
  e.model_parameters = model->num_parameters();
  const LoraShape lora = lora_shape(*model, config, o);
  std::vector<int64_t> held_layers;
  bool holds_loss = true;
  // Pipeline: what is alive at each of the rank's actions.
  struct PipelineMoment {
    double activations = 0.0;        // bytes the rank's stages saved, before TP splits them
    double loss_microbatches = 0.0;  // micro-batches whose loss ran and whose backward has not
    double gradient_copies = 0.0;    // f32 gradients of the rank's parameters
  };
  std::vector<PipelineMoment> pipeline_moments;
  double activation_bytes = 0.0;
  if (o.pipeline) {
    const PipelinePlacement& p = *o.pipeline;
    std::vector<double> stage_bytes(p.parts.size(), 0.0);
    for (int stage : p.schedule.stages_of(p.rank)) {
      stage_bytes[static_cast<size_t>(stage)] = saved_activation_bytes(
          config, o, layer_indices(p.parts[static_cast<size_t>(stage)]), lora.elements_per_token);
    }
    const std::vector<std::string> held = p.held_modules();
    model->retain_modules(held);
    held_layers = layer_indices(held);
    holds_loss = p.schedule.stage_rank.back() == p.rank;
    // Walk the rank's actions: a forward adds its stage's activations; a
    // full or weight backward goes through the stage's blocks from the last,
    // making each block's f32 weight gradients before freeing what it saved.
    // A micro-batch's gradients are a fresh copy beside the accumulated one
    // (from the second backward on) until the backward ends and adds them
    // in. Moments: after each forward, and at each block of a backward.
    // The fused loss makes its gradients in the forward; the last stage's
    // micro-batches keep them until their backward.
    const int last_stage = static_cast<int>(p.parts.size()) - 1;
    double live = 0.0, loss_in_flight = 0.0;
    int64_t in_flight = 0, backwards = 0;
    for (const parallel::pipeline::Action& a : p.schedule.actions[static_cast<size_t>(p.rank)]) {
      using parallel::pipeline::ActionType;
      const double bytes = stage_bytes[static_cast<size_t>(a.stage)];
      const double loss = a.stage == last_stage ? 1.0 : 0.0;
      const double accumulated = backwards > 0 ? 1.0 : 0.0;
      if (a.type == ActionType::forward) {
        live += bytes;
        loss_in_flight += loss;
        activation_bytes = std::max(activation_bytes, live);
        e.in_flight_microbatches = std::max(e.in_flight_microbatches, ++in_flight);
        pipeline_moments.push_back({live, loss_in_flight, accumulated});
      } else if (a.type == ActionType::full_backward || a.type == ActionType::backward_weight) {
        // The stage's share of the rank's gradients, by its blocks.
        const size_t blocks = std::max<size_t>(1, layer_indices(p.parts[static_cast<size_t>(a.stage)]).size());
        const double share = static_cast<double>(blocks) / static_cast<double>(std::max<size_t>(1, held_layers.size()));
        for (size_t block = 1; block <= blocks; ++block) {
          const double done = static_cast<double>(block) / static_cast<double>(blocks);
          const double freed = static_cast<double>(block - 1) / static_cast<double>(blocks);
          pipeline_moments.push_back({live - freed * bytes, loss_in_flight, accumulated + share * done});
        }
        live -= bytes;
        loss_in_flight -= loss;
        --in_flight;
        ++backwards;
      }
    }
  } else {
    for (int64_t i = 0; i < config.n_layers(); ++i) held_layers.push_back(i);
    activation_bytes = saved_activation_bytes(config, o, held_layers, lora.elements_per_token);
  }
  for (int64_t i : held_layers) e.adapter_parameters += lora.parameters[static_cast<size_t>(i)];
  e.parameters = model->num_parameters() + e.adapter_parameters;
  // What this rank holds of the model before FSDP shards it: tp splits all
  // but the MoE layers, and expert parallelism leaves a rank's shard as it is
  // (the experts split over ep, each part sharded over dp_shard / ep).
  double held_elements = static_cast<double>(e.adapter_parameters) / static_cast<double>(o.tp);
  for (auto& [name, parameter] : model->named_parameters()) {
    held_elements += static_cast<double>(parameter->data.numel()) / static_cast<double>(split_by(name, o.tp, 1));
  }
  const double shard = held_elements / static_cast<double>(o.dp_shard);
  // With LoRA only the adapters train: the frozen base has no gradient and no optimizer state.
  const double trainable_shard =
      o.lora_rank > 0 ? static_cast<double>(e.adapter_parameters) / static_cast<double>(o.dp_shard * o.tp) : shard;
  e.parameter_bytes = 4.0 * shard;
  // A pipeline stage's backward of one micro-batch makes a fresh f32
  // gradient beside the accumulated one: two gradient-sized buffers at most
  // (seen in its memory snapshots; when, the walk above says). Under FSDP the
  // micro-batches add into the units' gathered f32 buckets (counted with the
  // compute copies) and the shards' gradients are made once.
  const double gradient_copy = 4.0 * trainable_shard;
  e.gradient_bytes = (o.pipeline && o.dp_shard == 1 ? 2.0 : 1.0) * gradient_copy;
  e.optimizer_bytes = 2.0 * static_cast<double>(dtype_size(o.optimizer_state_dtype)) * trainable_shard;
  const double compute_size = static_cast<double>(dtype_size(o.compute_dtype));
  // A stage boundary's activation arriving and its gradient leaving, beyond what the blocks save.
  if (o.pipeline)
    e.pipeline_buffer_bytes = 2.0 * static_cast<double>(o.batch * o.seq_len * config.dim()) * compute_size;
  FsdpUnitBytes units;
  if (o.dp_shard > 1) {
    UnitLifetime lifetime = UnitLifetime::per_block;
    if (o.pipeline && !o.pipeline_reshards) lifetime = UnitLifetime::stage_all_step;
    if (o.pipeline && o.pipeline_reshards) {
      for (const parallel::pipeline::Action& a : o.pipeline->schedule.actions[static_cast<size_t>(o.pipeline->rank)]) {
        if (a.type == parallel::pipeline::ActionType::backward_weight)
          lifetime = UnitLifetime::stage_until_weight_backward;
      }
    }
    units = fsdp_unit_bytes(*model, held_layers, compute_size, lifetime, o.lora_rank > 0, o.tp, o.ep, o.dp_shard);
    e.compute_copy_bytes = units.largest();
  } else if (o.compute_dtype != DType::f32) {
    // Weights cast for forward stay alive while saved for backward: the whole model (this rank's part of it).
    e.compute_copy_bytes = compute_size * held_elements;
  }
  e.activation_bytes = activation_bytes / static_cast<double>(o.tp);
  // Under TP with sequence parallelism a block's norms run on the rank's
  // slice of the sequence, but attention's and the FFN's inputs are gathered
  // whole and kept for backward: 2 BSD per block beyond the split count.
  if (o.tp > 1 && o.activation_checkpoint == "none") {
    const double gathered = 2.0 * static_cast<double>(o.batch * o.seq_len * config.dim()) * compute_size *
                            (1.0 - 1.0 / static_cast<double>(o.tp));
    e.activation_bytes += gathered * static_cast<double>(held_layers.size());
  }
  e.ring_attention_bytes = ring_attention_bytes(config, options);
  double loss_backward_residue = 0.0;     // what of the loss's buffers outlives its backward
  double loss_kept_per_microbatch = 0.0;  // what a micro-batch's loss keeps from its forward to its backward
  double loss_kept_bytes = 0.0;           // ... for the most micro-batches in flight at once
  if (holds_loss) {
    const double hidden = static_cast<double>(o.batch * o.seq_len * config.dim());
    // Under TP the output projection holds vocab / tp rows (its f32 weight
    // gradient too, unless LoRA froze it) and the loss sees the whole sequence, gathered.
    const int64_t vocab_rows = config.vocab_size / o.tp;
    const double output_gradient = o.lora_rank > 0 ? 0.0 : 4.0 * static_cast<double>(vocab_rows * config.dim());
    // The final norm's output, kept for the loss's backward, and the hidden
    // state's and the output projection's gradients the loss returns; under
    // pipelining, for every micro-batch in flight.
    loss_backward_residue = hidden * compute_size + output_gradient;
    loss_kept_per_microbatch = loss_backward_residue + hidden * compute_size;
    double loss_microbatches = 1.0;
    for (const PipelineMoment& moment : pipeline_moments) {
      loss_microbatches = std::max(loss_microbatches, moment.loss_microbatches);
    }
    loss_kept_bytes = loss_microbatches * loss_kept_per_microbatch;
    e.loss_bytes = loss_kept_bytes;
    // The fused loss's f32 logits tile: token_chunk x vocab_chunk (0: the rank's whole vocabulary).
    const double tile_tokens = static_cast<double>(std::min(o.batch * o.seq_len, config.loss.token_chunk));
    const double tile_vocab =
        static_cast<double>(config.loss.vocab_chunk > 0 ? std::min(config.loss.vocab_chunk, vocab_rows) : vocab_rows);
    // Under TP the loss is always the fused vocabulary-parallel one.
    const bool fused = o.fused_loss || o.tp > 1;
    if (fused) {
      // In a narrower compute dtype the tile's gradient has a tile of its
      // own, and a split vocabulary adds up the hidden gradient in f32
      // (ops/fused_cross_entropy_tiles.cpp); in f32 the logits tile becomes its gradient.
      const bool narrow = compute_size < 4.0;
      const bool split_vocabulary = tile_vocab < static_cast<double>(vocab_rows);
      e.loss_bytes += tile_tokens * tile_vocab * (4.0 + (narrow ? compute_size : 0.0));
      if (narrow && split_vocabulary) e.loss_bytes += 4.0 * tile_tokens * static_cast<double>(config.dim());
    }
    // Unfused: the logits, their f32 log-softmax statistics and gradient, whole.
    if (!fused) {
      e.loss_bytes += static_cast<double>(o.batch * o.seq_len) * static_cast<double>(config.vocab_size) *
                      (2.0 * compute_size + 4.0);
    }
  }
  // Pipelining: the fullest moment of the walk, not its largest
  // activations, losses in flight and gradients together. Without FSDP the
  // gradients are up to two copies; with FSDP keeping the stage gathered all
  // step, its f32 buckets fill during the first backward and the
  // micro-batches add into them (one copy).
  if (o.pipeline && (o.dp_shard == 1 || units.buckets > 0.0)) {
    const bool sharded = o.dp_shard > 1;
    double fullest = 0.0;
    for (const PipelineMoment& m : pipeline_moments) {
      const double gradients =
          sharded ? std::min(1.0, m.gradient_copies) * units.buckets : m.gradient_copies * gradient_copy;
      fullest = std::max(fullest, m.activations / static_cast<double>(o.tp) +
                                      m.loss_microbatches * loss_kept_per_microbatch + gradients);
    }
    // With FSDP the reductions run after the last backward into the
    // gradients' shards, beside the buckets and no activation.
    const double all_gradients = sharded ? units.buckets + units.reduction + e.gradient_bytes : e.gradient_bytes;
    if (sharded) fullest = std::max(fullest, all_gradients);
    e.overlap_bytes = std::max(0.0, e.activation_bytes + all_gradients + loss_kept_bytes - fullest);
  }
  if (o.cpu_threads > 0) {
    double queries = 0.0;
    for (int64_t i : held_layers) {
      const nn::AttentionConfig& a = config.layers[static_cast<size_t>(i)].attention;
      queries = std::max(queries, static_cast<double>(o.batch * o.seq_len * a.n_heads * a.head_size()));
    }
    e.workspace_bytes = cpu_attention_workspace_bytes(config, o.cpu_threads, true, queries);
  }
  // With one micro-batch per step the gradients are made during backward,
  // as the activations and the loss's buffers are freed (a step starts with
  // none: the optimizer step ends by dropping them). The peak is the largest
  // of three moments, not their sum:
  //   the loss: every activation, the loss's buffers, the compute copies;
  //   a block's backward: the activations not yet freed and the gradients
  //     made so far (at most the larger of the two, plus what the loss
  //     leaves behind), the copies, and the block's own transient gradients
  //     or the attention kernel's workspace and ring buffers, whichever is larger;
  //   the end of backward: every gradient, what FSDP still holds.
  // Accumulation and pipelining keep earlier micro-batches' gradients
  // through later forwards: no overlap.
  if (!o.pipeline && o.microbatches == 1) {
    double transient = 0.0;
    for (int64_t i : held_layers) {
      transient = std::max(
          transient, block_backward_transient_elements(config.layers[static_cast<size_t>(i)], o.batch, o.seq_len));
    }
    // Ring attention's buffers live while a layer's attention runs, beside the kernel's workspace.
    transient =
        std::max(transient * compute_size / static_cast<double>(o.tp), e.workspace_bytes + e.ring_attention_bytes);
    const bool sharded = o.dp_shard > 1;
    const double at_loss = e.activation_bytes + e.loss_bytes + (sharded ? units.at_loss : e.compute_copy_bytes);
    double in_blocks = std::max(e.activation_bytes + loss_backward_residue, e.gradient_bytes) +
                       (sharded ? units.in_blocks - units.reduction : e.compute_copy_bytes) + transient;
    if (sharded && held_layers.size() > 1) {
      // FSDP's second block in backward also has the first's reduction in
      // flight, and the first's activations freed.
      const double freed_block =
          saved_activation_bytes(config, o, {held_layers.back()}, lora.elements_per_token) / static_cast<double>(o.tp);
      in_blocks =
          std::max(in_blocks, std::max(e.activation_bytes - freed_block + loss_backward_residue, e.gradient_bytes) +
                                  units.in_blocks + transient);
    }
    const double at_end = e.gradient_bytes + (sharded ? units.at_end : 0.0);
    e.overlap_bytes =
        std::max(0.0, e.gradient_bytes + e.activation_bytes + e.loss_bytes + e.compute_copy_bytes + e.workspace_bytes +
                          e.ring_attention_bytes - std::max({at_loss, in_blocks, at_end}));
  }
  // Naive attention's scores, probabilities and their gradients for the layer in backward, beyond what it saves.
  if (o.naive_attention) {
    double widest = 0.0;
    for (int64_t i : held_layers) {
      widest = std::max(widest, static_cast<double>(config.layers[static_cast<size_t>(i)].attention.n_heads));
    }
    e.activation_bytes += 3.0 * 4.0 * static_cast<double>(o.batch) * widest * static_cast<double>(o.seq_len) *
                          static_cast<double>(o.seq_len);
  }
  return e;
}

std::string format_memory_estimate(const MemoryEstimate& e) {
  auto gib = [](double bytes) { return bytes / kBytesPerGiB; };
  std::ostringstream out;
  out << fmt::format("parameters        {:>16}\n", e.parameters);
  if (e.adapter_parameters > 0) out << fmt::format("  LoRA adapters   {:>16}\n", e.adapter_parameters);
  if (e.parameters - e.adapter_parameters != e.model_parameters) {
    out << fmt::format("  of the model's  {:>16}\n", e.model_parameters);
  }
  out << fmt::format("  weights (f32)   {:12.3f} GiB\n", gib(e.parameter_bytes));
  out << fmt::format("  gradients (f32) {:12.3f} GiB\n", gib(e.gradient_bytes));
  out << fmt::format("  optimizer       {:12.3f} GiB\n", gib(e.optimizer_bytes));
  out << fmt::format("  compute copies  {:12.3f} GiB\n", gib(e.compute_copy_bytes));
  out << fmt::format("activations       {:12.3f} GiB", gib(e.activation_bytes));
  out << (e.in_flight_microbatches > 1 ? fmt::format(" ({} micro-batches in flight)\n", e.in_flight_microbatches)
                                       : std::string("\n"));
  out << fmt::format("loss              {:12.3f} GiB\n", gib(e.loss_bytes));
  if (e.overlap_bytes > 0) {
    out << fmt::format("not at once       {:12.3f} GiB (gradients fill as activations free)\n", -gib(e.overlap_bytes));
  }
  if (e.ring_attention_bytes > 0) out << fmt::format("ring attention    {:12.3f} GiB\n", gib(e.ring_attention_bytes));
  if (e.workspace_bytes > 0) out << fmt::format("attention workspace {:10.3f} GiB\n", gib(e.workspace_bytes));
  if (e.pipeline_buffer_bytes > 0) out << fmt::format("pipeline buffers  {:12.3f} GiB\n", gib(e.pipeline_buffer_bytes));
  out << fmt::format("total per rank    {:12.3f} GiB\n", gib(e.total()));
  return out.str();
}

double cpu_attention_workspace_bytes(const DecoderConfig& config, int64_t threads, bool backward,
                                     double query_elements) {
  constexpr double kTile = 128.0;  // the kernel's kBlockQ = kBlockK
  double dim = 0.0;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    dim = std::max(dim, static_cast<double>(block.attention.head_size()));
  }
  const double forward = 4.0 * kTile * dim + kTile * kTile + 2.0 * kTile;
  const double per_thread = backward ? std::max(forward, 6.0 * kTile * dim + 2.0 * kTile * kTile) : forward;
  return 4.0 * (static_cast<double>(threads) * per_thread + (backward ? query_elements : 0.0));
}

GenerationMemory estimate_generation_memory(const DecoderConfig& config, DType weight_dtype, int64_t prompt_tokens,
                                            int64_t capacity, int64_t cpu_threads) {
  GenerationMemory m;
  const double size = static_cast<double>(dtype_size(weight_dtype));
  m.weight_bytes = static_cast<double>(config.build(Device::meta())->num_parameters()) * size;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    const nn::AttentionConfig& a = block.attention;
    // Latent attention caches a latent and one rotated key per position, not per-head keys and values.
    const int64_t per_position =
        block.mla ? block.mla->kv_lora_rank + block.mla->qk_rope_head_dim : 2 * a.kv_heads() * a.head_size();
    m.kv_cache_bytes += static_cast<double>(capacity) * static_cast<double>(per_position) * size;
  }
  // The prompt's forward holds a few [tokens, dim] hidden states, one layer's
  // q/k/v and FFN intermediates at a time (no backward) and every position's
  // logits, in f32 at most.
  double widest = 0.0;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    const nn::AttentionConfig& a = block.attention;
    const double ffn = block.moe ? static_cast<double>(block.moe->top_k * block.moe->hidden_dim) * 3.0
                                 : 3.0 * static_cast<double>(block.feed_forward.hidden_dim);
    widest = std::max(widest, static_cast<double>((a.n_heads + 2 * a.kv_heads()) * a.head_size()) + ffn);
  }
  const double tokens = static_cast<double>(std::max<int64_t>(prompt_tokens, 1));
  m.forward_bytes =
      4.0 * tokens * (4.0 * static_cast<double>(config.dim()) + widest + static_cast<double>(config.vocab_size));
  if (cpu_threads > 0) m.forward_bytes += cpu_attention_workspace_bytes(config, cpu_threads, false, 0.0);
  return m;
}

}  // namespace titan::models
