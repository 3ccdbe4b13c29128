// Training memory per rank, estimated without allocating anything: the
// parameter count comes from a model built on the meta device, the
// activation bytes from what each block's backward keeps (see the .cpp).
#pragma once

#include <string>
#include <vector>

#include <optional>

#include "titan/distributed/pipeline_schedule.h"
#include "titan/models/decoder.h"
#include "titan/models/model_parts.h"

namespace titan::models {

// Where a pipeline rank stands: every stage's modules, the schedule, which rank.
struct PipelinePlacement {
  ModelParts parts;
  distributed::pipeline::Schedule schedule;
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
  int64_t dp_shard = 1;  // FSDP shards: parameters, gradients and optimizer states divide by it
  // Pipeline parallelism: the rank's stages only, `batch` sequences per
  // micro-batch, and as many micro-batches' activations as the schedule keeps
  // in flight on the rank at once (from a forward until its full or weight
  // backward; the input-gradient half frees part of them earlier, not counted).
  std::optional<PipelinePlacement> pipeline;
  // Context parallelism: a rank holds seq_len / cp of every sequence (its
  // activations and loss shrink by cp, its parameters are sharded over
  // dp_shard x cp), and ring attention's key/value buffers come on top
  // (context_parallel_rotate_method: allgather or alltoall).
  int64_t cp = 1;
  std::string cp_rotate_method = "allgather";
};

struct MemoryEstimate {
  int64_t parameters = 0;              // count (this pipeline rank's stages)
  int64_t model_parameters = 0;        // count, the whole model
  int64_t in_flight_microbatches = 1;  // pipeline: the most micro-batches a rank's stages hold activations for
  double parameter_bytes = 0;          // f32 master weights (this rank's shard)
  double gradient_bytes = 0;           // f32 gradients (this rank's shard)
  double optimizer_bytes = 0;          // AdamW moments (this rank's shard)
  double compute_copy_bytes = 0;       // parameters materialised in the compute dtype while alive for backward
  double activation_bytes = 0;         // saved for backward at the peak (end of forward)
  double loss_bytes = 0;               // fused loss: its hidden and weight gradients
  double ring_attention_bytes = 0;     // context parallelism: one layer's K/V and gradient buffers in flight
  double total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + compute_copy_bytes + activation_bytes + loss_bytes +
           ring_attention_bytes;
  }
};

MemoryEstimate estimate_memory(const DecoderConfig& config, const MemoryEstimateOptions& options);
std::string format_memory_estimate(const MemoryEstimate& estimate);

}  // namespace titan::models
