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

MemoryEstimate estimate_memory(const DecoderConfig& config, const MemoryEstimateOptions& o) {
  MemoryEstimate e;
  e.parameters = config.build(Device::meta())->num_parameters();
  const double shard = static_cast<double>(e.parameters) / static_cast<double>(o.dp_shard);
  e.parameter_bytes = 4.0 * shard;
  e.gradient_bytes = 4.0 * shard;
  e.optimizer_bytes = 2.0 * static_cast<double>(dtype_size(o.optimizer_state_dtype)) * shard;
  const double compute_size = static_cast<double>(dtype_size(o.compute_dtype));
  const auto layers = static_cast<double>(config.n_layers());
  // Weights materialised for forward stay alive while saved for backward (whole
  // model unsharded; with FSDP resharding only a block or two at a time).
  if (o.compute_dtype != DType::f32 || o.dp_shard > 1) {
    const double per_layer = static_cast<double>(e.parameters) / layers;
    e.compute_copy_bytes = compute_size * (o.dp_shard > 1 ? 2.0 * per_layer : static_cast<double>(e.parameters));
  }
  double all_blocks = 0.0, largest_block = 0.0;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    const double bytes = block_activation_elements(block, o.batch, o.seq_len) * compute_size;
    all_blocks += bytes;
    largest_block = std::max(largest_block, bytes);
  }
  const double block_input = static_cast<double>(o.batch * o.seq_len * config.dim()) * compute_size;
  if (o.activation_checkpoint == "offload") {
    // On the device: the last block (kept), one being copied out during
    // forward, and one being copied back during backward.
    e.activation_bytes = std::min(3.0, layers) * largest_block;
  } else if (o.activation_checkpoint == "none") {
    e.activation_bytes = all_blocks;
  } else {
    // Checkpointed blocks keep their input; one of them is recomputed whole during backward.
    double kept = 0.0;
    int64_t checkpointed = 0;
    for (int64_t i = 0; i < config.n_layers(); ++i) {
      const bool recomputed = o.activation_checkpoint == "full" || i % o.selective_every == 0;
      const double bytes =
          block_activation_elements(config.layers[static_cast<size_t>(i)], o.batch, o.seq_len) * compute_size;
      kept += recomputed ? block_input : bytes;
      checkpointed += recomputed ? 1 : 0;
    }
    e.activation_bytes = kept + (checkpointed > 0 ? largest_block : 0.0);
  }
  const double hidden = static_cast<double>(o.batch * o.seq_len * config.dim());
  e.loss_bytes = hidden * compute_size + 4.0 * static_cast<double>(config.vocab_size * config.dim());
  return e;
}

std::string format_memory_estimate(const MemoryEstimate& e) {
  auto gib = [](double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); };
  std::ostringstream out;
  out << fmt::format("parameters        {:>16}\n", e.parameters);
  out << fmt::format("  weights (f32)   {:12.3f} GiB\n", gib(e.parameter_bytes));
  out << fmt::format("  gradients (f32) {:12.3f} GiB\n", gib(e.gradient_bytes));
  out << fmt::format("  optimizer       {:12.3f} GiB\n", gib(e.optimizer_bytes));
  out << fmt::format("  compute copies  {:12.3f} GiB\n", gib(e.compute_copy_bytes));
  out << fmt::format("activations       {:12.3f} GiB\n", gib(e.activation_bytes));
  out << fmt::format("loss              {:12.3f} GiB\n", gib(e.loss_bytes));
  out << fmt::format("total per rank    {:12.3f} GiB\n", gib(e.total()));
  return out.str();
}

}  // namespace titan::models
