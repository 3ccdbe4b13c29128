#include "titan/models/memory_estimate.h"

#include <algorithm>
#include <sstream>

namespace titan::models {
namespace {

// Elements one block keeps for backward, from what its functions save:
//   norms: their inputs x and h            2 BSD (+ f32 rstd, negligible)
//   q/k/v and w1/w3 linears: normed inputs 2 BSD
//   attention: q, k, v and output          BS (2 Hq + 2 Hkv) Dh (+ f32 lse)
//   swiglu: gate and up; w2: its input     3 BSF
double block_activation_elements(const DecoderConfig& c, int64_t batch, int64_t seq) {
  const auto& a = c.block.attention;
  const double tokens = static_cast<double>(batch * seq);
  const double dim = static_cast<double>(c.dim());
  const double attention = static_cast<double>((2 * a.n_heads + 2 * a.kv_heads()) * a.head_size());
  const double ffn = 3.0 * static_cast<double>(c.block.feed_forward.hidden_dim);
  return tokens * (4.0 * dim + attention + ffn);
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
  // Weights materialised for forward stay alive while saved for backward (whole
  // model unsharded; with FSDP resharding only a block or two at a time).
  if (o.compute_dtype != DType::f32 || o.dp_shard > 1) {
    const double per_layer = static_cast<double>(e.parameters) / static_cast<double>(config.n_layers);
    e.compute_copy_bytes = compute_size * (o.dp_shard > 1 ? 2.0 * per_layer : static_cast<double>(e.parameters));
  }
  const double block = block_activation_elements(config, o.batch, o.seq_len) * compute_size;
  const double block_input = static_cast<double>(o.batch * o.seq_len * config.dim()) * compute_size;
  if (o.activation_checkpoint == "offload") {
    // On the device: the last block (kept), one being copied out during
    // forward, and one being copied back during backward.
    e.activation_bytes = std::min<double>(3.0, static_cast<double>(config.n_layers)) * block;
  } else {
    int64_t checkpointed = 0;
    if (o.activation_checkpoint == "full") checkpointed = config.n_layers;
    if (o.activation_checkpoint == "selective")
      checkpointed = (config.n_layers + o.selective_every - 1) / o.selective_every;
    // Checkpointed blocks keep their input; one of them is recomputed whole during backward.
    e.activation_bytes = static_cast<double>(config.n_layers - checkpointed) * block +
                         static_cast<double>(checkpointed) * block_input + (checkpointed > 0 ? block : 0.0);
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
