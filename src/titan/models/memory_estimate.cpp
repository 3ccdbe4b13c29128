#include "titan/models/memory_estimate.h"

#include <algorithm>
#include <sstream>

namespace titan::models {
namespace {

// Elements one block keeps for backward, from what its functions save:
//   norms: their inputs x and h            2 BSD (+ f32 rstd, negligible)
//   q/k/v linears: normed input            BSD
//   attention: q, k, v and output          BS (2 Hq + 2 Hkv) Dh (+ f32 lse)
//   dense FFN: w1/w3 input BSD, swiglu's gate and up, w2's input  BSD + 3 BSF
//   MoE FFN: the normed input BSD, router scores BSE (f32, counted as 2
//            elements each), and per routed row (BSk of them) its permuted
//            input D, gate, up and hidden 3H, and its output D for the combine;
//            shared experts as a dense FFN.
double block_activation_elements(const nn::TransformerBlockConfig& block, int64_t batch, int64_t seq) {
  const auto& a = block.attention;
  const double tokens = static_cast<double>(batch * seq);
  const double dim = static_cast<double>(a.dim);
  const double attention = static_cast<double>((2 * a.n_heads + 2 * a.kv_heads()) * a.head_size());
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

}  // namespace

namespace {

// Bytes one micro-batch leaves saved for backward in `layers` under the
// activation checkpointing mode.
double saved_activation_bytes(const DecoderConfig& config, const MemoryEstimateOptions& o,
                              const std::vector<int64_t>& layers) {
  const double compute_size = static_cast<double>(dtype_size(o.compute_dtype));
  const auto block_bytes = [&](int64_t i) {
    return block_activation_elements(config.layers[static_cast<size_t>(i)], o.batch, o.seq_len) * compute_size;
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
  for (int64_t i : layers) {
    const bool recomputed = o.activation_checkpoint == "full" || i % o.selective_every == 0;
    kept += recomputed ? block_input : block_bytes(i);
    any_checkpointed = any_checkpointed || recomputed;
  }
  return kept + (any_checkpointed ? largest_block : 0.0);
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
    const double local = static_cast<double>(o.batch * (o.seq_len / o.cp));
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
  std::vector<int64_t> held_layers;
  bool holds_loss = true;
  double activation_bytes = 0.0;
  if (o.pipeline) {
    const PipelinePlacement& p = *o.pipeline;
    std::vector<double> stage_bytes(p.parts.size(), 0.0);
    for (int stage : p.schedule.stages_of(p.rank)) {
      stage_bytes[static_cast<size_t>(stage)] =
          saved_activation_bytes(config, o, layer_indices(p.parts[static_cast<size_t>(stage)]));
    }
    const std::vector<std::string> held = p.held_modules();
    model->retain_modules(held);
    held_layers = layer_indices(held);
    holds_loss = p.schedule.stage_rank.back() == p.rank;
    // Walk the rank's actions: a forward adds its stage's activations, a full or weight backward frees them.
    double live = 0.0;
    int64_t in_flight = 0;
    for (const distributed::pipeline::Action& a : p.schedule.actions[static_cast<size_t>(p.rank)]) {
      using distributed::pipeline::ActionType;
      const double bytes = stage_bytes[static_cast<size_t>(a.stage)];
      if (a.type == ActionType::forward) {
        live += bytes;
        activation_bytes = std::max(activation_bytes, live);
        e.in_flight_microbatches = std::max(e.in_flight_microbatches, ++in_flight);
      } else if (a.type == ActionType::full_backward || a.type == ActionType::backward_weight) {
        live -= bytes;
        --in_flight;
      }
    }
  } else {
    for (int64_t i = 0; i < config.n_layers(); ++i) held_layers.push_back(i);
    activation_bytes = saved_activation_bytes(config, o, held_layers);
  }
  e.parameters = model->num_parameters();
  const double shard = static_cast<double>(e.parameters) / static_cast<double>(o.dp_shard);
  e.parameter_bytes = 4.0 * shard;
  e.gradient_bytes = 4.0 * shard;
  e.optimizer_bytes = 2.0 * static_cast<double>(dtype_size(o.optimizer_state_dtype)) * shard;
  const double compute_size = static_cast<double>(dtype_size(o.compute_dtype));
  // Weights materialised for forward stay alive while saved for backward (whole
  // model unsharded; with FSDP resharding only a block or two at a time).
  if (o.compute_dtype != DType::f32 || o.dp_shard > 1) {
    const double per_layer =
        static_cast<double>(e.parameters) / static_cast<double>(std::max<size_t>(1, held_layers.size()));
    e.compute_copy_bytes = compute_size * (o.dp_shard > 1 ? 2.0 * per_layer : static_cast<double>(e.parameters));
  }
  e.activation_bytes = activation_bytes;
  e.ring_attention_bytes = ring_attention_bytes(config, options);
  if (holds_loss) {
    const double hidden = static_cast<double>(o.batch * o.seq_len * config.dim());
    e.loss_bytes = hidden * compute_size + 4.0 * static_cast<double>(config.vocab_size * config.dim());
  }
  return e;
}

std::string format_memory_estimate(const MemoryEstimate& e) {
  auto gib = [](double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); };
  std::ostringstream out;
  out << fmt::format("parameters        {:>16}\n", e.parameters);
  if (e.parameters != e.model_parameters) out << fmt::format("  of the model's  {:>16}\n", e.model_parameters);
  out << fmt::format("  weights (f32)   {:12.3f} GiB\n", gib(e.parameter_bytes));
  out << fmt::format("  gradients (f32) {:12.3f} GiB\n", gib(e.gradient_bytes));
  out << fmt::format("  optimizer       {:12.3f} GiB\n", gib(e.optimizer_bytes));
  out << fmt::format("  compute copies  {:12.3f} GiB\n", gib(e.compute_copy_bytes));
  out << fmt::format("activations       {:12.3f} GiB", gib(e.activation_bytes));
  out << (e.in_flight_microbatches > 1 ? fmt::format(" ({} micro-batches in flight)\n", e.in_flight_microbatches)
                                       : std::string("\n"));
  out << fmt::format("loss              {:12.3f} GiB\n", gib(e.loss_bytes));
  if (e.ring_attention_bytes > 0) out << fmt::format("ring attention    {:12.3f} GiB\n", gib(e.ring_attention_bytes));
  out << fmt::format("total per rank    {:12.3f} GiB\n", gib(e.total()));
  return out.str();
}

}  // namespace titan::models
