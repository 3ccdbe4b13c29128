// A candidate layout of a training job over N devices, and the enumeration
// of every layout titan would accept for a model, a device count and a
// global batch (docs/planning.md). The rules are the trainer's own refusals
// written as arithmetic (tests/plan/layout_enumeration_test.cpp checks them
// against the trainer building each layout on the rehearsal backend).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "titan/core/dtype.h"
#include "titan/models/decoder.h"
#include "titan/train/job_config.h"

namespace titan::plan {

// What `titan plan` is asked: the model, the cluster and the batch.
struct PlanRequest {
  std::string model = "llama3";  // titan's family name (TorchTitan's names are mapped)
  std::string flavor = "8B";
  int64_t vocab_size = 0;  // 0: the flavor's
  int64_t devices = 8;
  int64_t devices_per_node = 8;
  int64_t seq_len = 8192;
  int64_t global_batch_tokens = 0;  // 0: one sequence per data-parallel rank
  DType compute_dtype = DType::bf16;
  // Costed as if on: torch.compile's fused kernels (titan: compile.enable on
  // CUDA) and float8 linear layers (the device's fp8 peak for their GEMMs).
  bool compile = false;
  bool float8 = false;
  // The kernels costed: "titan" (one pass per op, as titan's kernels run), or
  // "torchtitan" (eager PyTorch: its elementwise chains in several f32
  // passes, FlashAttention-2 through SDPA), for comparing with TorchTitan's figures.
  std::string software = "titan";
  // How context parallelism's keys and values travel (parallelism.context_parallel_rotate_method).
  std::string cp_rotate_method = "allgather";
  // Limits of the search (empty: every schedule / mode titan has).
  std::vector<std::string> schedules;         // pipeline schedules to try
  std::vector<std::string> activation_modes;  // none, selective, full
  int64_t max_pipeline_degree = 64;
};

struct Layout {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, pp = 1, ep = 1;
  std::string pipeline_schedule;               // empty when pp == 1
  int64_t stages_per_rank = 1;                 // pipeline: virtual stages each rank holds
  int64_t local_batch_size = 1;                // sequences per data-parallel rank per forward (TorchTitan's)
  int64_t microbatch_size = 1;                 // pipeline: sequences per pipeline micro-batch
  int64_t gradient_accumulation = 1;           // forwards per step per rank (global / (local x dp))
  std::string activation_checkpoint = "none";  // none, selective (per-op), full

  int64_t devices() const { return dp_replicate * dp_shard * cp * tp * pp; }
  int64_t dp() const { return dp_replicate * dp_shard; }
  int64_t pipeline_microbatches() const { return pp > 1 ? local_batch_size / microbatch_size : 1; }
  // "FSDP 8 x TP 8 x PP 8 (Interleaved1F1B), AC full, batch 32 (mb 1)"
  std::string describe() const;
  bool operator==(const Layout&) const = default;
};

// Every layout of request.devices that titan accepts for `config`: the
// degrees' product is the device count; TP divides the heads (query and
// key/value) and the FFN width and stays within a node; EP only for MoE, a
// factor of dp_shard x cp dividing the expert count; CP divides the sequence
// (2 x cp chunks for the load-balanced split); PP no deeper than the layers
// allow, each schedule with the micro-batch counts it runs; the global batch
// divides over the data-parallel ranks. Each with every activation
// checkpointing mode asked for. (The rules: plan/layout_check.h. The search
// space: local batches and pipeline micro-batches of a power of two or the
// whole; under PP the whole per-rank batch in one pass, with micro-batches of
// more than one sequence only while there are at least pp of them; each
// schedule at its default stages per rank.)
std::vector<Layout> enumerate_layouts(const PlanRequest& request, const models::DecoderConfig& config);

// The job config of a layout: `job` keeps its other keys; parallelism.*,
// training.local_batch_size / global_batch_size / seq_len and
// activation_checkpoint.* are set.
void apply_layout(const Layout& layout, const PlanRequest& request, train::JobConfig& job);

// The job TOML `titan train` runs for the layout (model, flavor, batch,
// parallelism, activation checkpointing, mixed precision, a few steps).
std::string layout_job_toml(const Layout& layout, const PlanRequest& request);

}  // namespace titan::plan
