// Training memory per rank, estimated without allocating anything: the
// parameter count comes from a model built on the meta device, the
// activation bytes from what each block's backward keeps (see the .cpp).
#pragma once

#include <string>
#include <vector>

#include <optional>

#include "titan/models/decoder.h"
#include "titan/models/model_parts.h"
#include "titan/parallel/pipeline_schedule.h"

namespace titan::models {

// Where a pipeline rank stands: every stage's modules, the schedule, which rank.
struct PipelinePlacement {
  ModelParts parts;
  parallel::pipeline::Schedule schedule;
  int rank = 0;

  // The modules of every stage this rank holds, in stage order.
  std::vector<std::string> held_modules() const;
};

struct MemoryEstimateOptions {
  int64_t batch = 1;
  int64_t seq_len = 2048;
  DType compute_dtype = DType::bf16;  // activations and materialised parameters
  DType optimizer_state_dtype = DType::f32;
  std::string activation_checkpoint = "none";  // none, full, selective, offload
  int64_t selective_every = 2;
  // selective: every block checkpointed keeping the op outputs TorchTitan's
  // per-op policy keeps (parallel/activation_checkpoint.h), not every N-th whole.
  bool selective_ops = false;
  int64_t dp_shard = 1;  // FSDP shards: parameters, gradients and optimizer states divide by it
  // Tensor parallelism: the weights divide by it too (the embedding table and
  // output projection split by vocabulary rows; the replicated norms counted
  // as split, a negligible error), and the activations (a lower
  // bound: some, like the norms' inputs under sequence parallelism, do).
  int64_t tp = 1;
  // Expert parallelism (a factor of dp_shard, not more ranks): each MoE
  // layer's experts split over ep, each part sharded over dp_shard / ep, so a
  // rank's shard is unchanged but a gathered expert unit holds 1 / ep of the
  // experts. MoE layers are whole on every tp rank: their parameters do not
  // divide by tp.
  int64_t ep = 1;
  // Micro-batches per step (gradient accumulation): > 1 keeps the earlier
  // ones' gradients alive through the later forwards.
  int64_t microbatches = 1;
  // Pipeline parallelism: the rank's stages only, `batch` sequences per
  // micro-batch, and as many micro-batches' activations as the schedule keeps
  // in flight on the rank at once (from a forward until its full or weight
  // backward; the input-gradient half frees part of them earlier, not counted).
  std::optional<PipelinePlacement> pipeline;
  // FSDP under pipelining with reshard_after_forward "always": each block's
  // units gathered only around its forward and backward, each micro-batch's
  // gradients reduced as they complete (as without pipelining), instead of
  // every unit of the stage gathered with its f32 gradient all step.
  bool pipeline_reshards = false;
  // Context parallelism: a rank holds seq_len / cp of every sequence (its
  // activations and loss shrink by cp, its parameters are sharded over
  // dp_shard x cp), and ring attention's key/value buffers come on top
  // (context_parallel_rotate_method: allgather or alltoall).
  int64_t cp = 1;
  std::string cp_rotate_method = "allgather";
  // LoRA (lora_rank > 0): adapters on the modules named in lora_modules
  // (attention.wq, feed_forward.w1, ...) of every layer holding them. The base
  // is frozen: only the adapters have gradients and optimizer state. Each
  // adapter keeps its [tokens, r] projection for backward, and with dropout
  // also its dropped input.
  int64_t lora_rank = 0;
  std::vector<std::string> lora_modules;
  bool lora_dropout = false;
  // The plain (unfused) loss materialises the logits [tokens, vocab] and their gradient.
  bool fused_loss = true;
  // Naive attention materialises each layer's [B, Hq, Sq, Sk] scores, and keeps its probabilities for backward.
  bool naive_attention = false;
  // > 0: the CPU backend with this many threads, whose flash attention holds
  // per-thread tiles (and, in backward, an f32 copy of the queries' gradient).
  int64_t cpu_threads = 0;
};

struct MemoryEstimate {
  int64_t parameters = 0;              // count (this pipeline rank's stages)
  int64_t model_parameters = 0;        // count, the whole model
  int64_t adapter_parameters = 0;      // LoRA: count (this rank's layers), included in `parameters`
  int64_t in_flight_microbatches = 1;  // pipeline: the most micro-batches a rank's stages hold activations for
  double parameter_bytes = 0;          // f32 master weights (this rank's shard)
  double gradient_bytes = 0;           // f32 gradients (this rank's shard)
  double optimizer_bytes = 0;          // AdamW moments (this rank's shard)
  double compute_copy_bytes = 0;       // parameters materialised in the compute dtype while alive for backward
  double activation_bytes = 0;         // saved for backward at the peak (end of forward)
  double loss_bytes = 0;               // final norm output, loss gradients (per micro-batch in flight), tile
  double ring_attention_bytes = 0;     // context parallelism: one layer's K/V and gradient buffers in flight
  double pipeline_buffer_bytes = 0;    // pipeline: a boundary activation and its gradient in transit
  double workspace_bytes = 0;          // one layer's attention workspace (CPU: per-thread tiles)
  double overlap_bytes = 0;            // subtracted: what of the above is never alive at once (see the .cpp)
  double total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + compute_copy_bytes + activation_bytes + loss_bytes +
           ring_attention_bytes + pipeline_buffer_bytes + workspace_bytes - overlap_bytes;
  }
};

MemoryEstimate estimate_memory(const DecoderConfig& config, const MemoryEstimateOptions& options);
std::string format_memory_estimate(const MemoryEstimate& estimate);

// What `titan generate` allocates: the weights in `weight_dtype`, a KV cache
// of `capacity` positions (prompt + new tokens) for one sequence in the
// weights' dtype, and the prompt's forward (its hidden states, one layer's
// attention and FFN intermediates, and its last-position logits).
struct GenerationMemory {
  double weight_bytes = 0, kv_cache_bytes = 0, forward_bytes = 0;
  double total() const { return weight_bytes + kv_cache_bytes + forward_bytes; }
};
GenerationMemory estimate_generation_memory(const DecoderConfig& config, DType weight_dtype, int64_t prompt_tokens,
                                            int64_t capacity, int64_t cpu_threads);

// The CPU flash attention's per-thread tiles for `config`'s widest layer
// (ops/cpu/kernels/attention.cpp): forward Q, O, K and V tiles, the score
// tile and row statistics; with `backward`, its larger tiles and the f32 dQ
// accumulators of its fused sweep (one f32 copy of `queries` [B, Sq, Hq, D]).
double cpu_attention_workspace_bytes(const DecoderConfig& config, int64_t threads, bool backward,
                                     double query_elements);

}  // namespace titan::models
