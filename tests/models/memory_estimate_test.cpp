// The memory estimate's activation terms, checked against the block count
// each activation-checkpointing mode keeps (the formula's own inputs).
#include "titan/models/memory_estimate.h"

#include <gtest/gtest.h>

#include "titan/models/model_spec.h"

namespace titan::models {
namespace memory_estimate_test {

TEST(MemoryEstimate, ActivationModesKeepTheirNumberOfBlocks) {
  const DecoderConfig config = model_config("llama3", "1B");
  MemoryEstimateOptions o;
  o.batch = 2;
  o.seq_len = 4096;
  auto activations = [&](const std::string& mode) {
    o.activation_checkpoint = mode;
    return estimate_memory(config, o).activation_bytes;
  };
  const double none = activations("none"), full = activations("full"), offload = activations("offload");
  const double block = none / static_cast<double>(config.n_layers());
  // Offload keeps three blocks on the device: the last, one copying out, one coming back.
  EXPECT_DOUBLE_EQ(offload, 3.0 * block);
  // Full checkpointing keeps every block's input plus one recomputed block.
  EXPECT_LT(full, offload);
  EXPECT_GT(full, block);
  // Nothing else in the estimate depends on the mode.
  o.activation_checkpoint = "none";
  const MemoryEstimate a = estimate_memory(config, o);
  o.activation_checkpoint = "offload";
  const MemoryEstimate b = estimate_memory(config, o);
  EXPECT_EQ(a.parameter_bytes, b.parameter_bytes);
  EXPECT_EQ(a.loss_bytes, b.loss_bytes);
}

// TorchTitan's per-op policy keeps, beyond full recomputation's block inputs,
// per token of every block: q (32 x 64), v (8 x 64), attention's output
// (32 x 64) and f32 log-sum-exp (32, as 2 bf16 elements), the FFN's up
// projection (8192) and its output (2048), in bf16.
TEST(MemoryEstimate, SelectiveOpsKeepTheOutputsThePolicyKeeps) {
  const DecoderConfig config = model_config("llama3", "1B");
  MemoryEstimateOptions o;
  o.batch = 2;
  o.seq_len = 4096;
  o.activation_checkpoint = "full";
  const double full = estimate_memory(config, o).activation_bytes;
  o.activation_checkpoint = "selective";
  o.selective_ops = true;
  const double ops = estimate_memory(config, o).activation_bytes;
  const double per_token = (32 * 64 + 8 * 64 + 32 * 64 + 2 * 32 + 8192 + 2048) * 2.0;
  EXPECT_DOUBLE_EQ(ops - full, static_cast<double>(config.n_layers()) * 2 * 4096 * per_token);
  o.activation_checkpoint = "none";
  EXPECT_LT(ops, estimate_memory(config, o).activation_bytes);
}

// Under context parallelism a rank is a rank with seq_len / cp tokens whose
// parameters shard over dp_shard x cp, plus ring attention's buffers: for
// llama3 1B (32 query, 8 key/value heads of 64) at batch 1, bf16, alltoall
// holds its f32 output and dq accumulators for its queries (2 x 4 x S/cp x
// 2048 bytes), two ranks' K/V (2 x 2 x S/cp x 512 x 2 bytes) and three f32 K/V
// gradient buffers (3 x 4 x 2 x S/cp x 512); allgather every rank's K/V with
// their f32 gradients and the reduce-scatter's copy.
TEST(MemoryEstimate, ContextParallelRanksHoldTheirSliceAndRingBuffers) {
  const DecoderConfig config = model_config("llama3", "1B");
  MemoryEstimateOptions o;
  o.seq_len = 65536;
  o.cp = 4;
  o.cp_rotate_method = "alltoall";
  const MemoryEstimate ring = estimate_memory(config, o);
  MemoryEstimateOptions slice;
  slice.seq_len = 65536 / 4;
  slice.dp_shard = 4;
  const MemoryEstimate local = estimate_memory(config, slice);
  EXPECT_DOUBLE_EQ(ring.activation_bytes, local.activation_bytes);
  EXPECT_DOUBLE_EQ(ring.loss_bytes, local.loss_bytes);
  EXPECT_DOUBLE_EQ(ring.parameter_bytes, local.parameter_bytes);
  const double tokens = 65536.0 / 4.0, kv = 2.0 * tokens * 512.0;
  EXPECT_DOUBLE_EQ(ring.ring_attention_bytes, 2.0 * 4.0 * tokens * 2048.0 + kv * (2.0 * 2.0 + 3.0 * 4.0));
  o.cp_rotate_method = "allgather";
  EXPECT_DOUBLE_EQ(estimate_memory(config, o).ring_attention_bytes,
                   2.0 * 4.0 * tokens * 2048.0 + 4.0 * kv * (2.0 + 2.0 * 4.0));
  // The ring's buffers live while attention runs, not at the loss: they add at most their size.
  EXPECT_GE(ring.total(), local.total());
  EXPECT_LE(ring.total(), local.total() + ring.ring_attention_bytes);
  o.seq_len = 65537;
  EXPECT_THROW(estimate_memory(config, o), Error);
}

// Under pipeline parallelism each rank counts its stages' parameters (which
// add up to the model's), the loss only on the last stage's rank, and a
// stage's activations once per micro-batch the schedule keeps in flight:
// 1F1B's first rank holds as many micro-batches as there are ranks, GPipe's every one.
TEST(MemoryEstimate, PipelineRanksCountTheirStagesAndMicrobatchesInFlight) {
  const DecoderConfig config = model_config("llama3", "8B");  // untied: the embeddings live on one stage
  const std::vector<std::string> fqns = decoder_module_fqns(config);
  MemoryEstimateOptions o;
  o.seq_len = 1024;
  const MemoryEstimate whole = estimate_memory(config, o);
  const double block = whole.activation_bytes / static_cast<double>(config.n_layers());
  const auto placement = [&](const std::string& schedule, int rank) {
    const int ranks = 4, stages = ranks * parallel::pipeline::stages_per_rank(schedule);
    return PipelinePlacement{split_module_fqns(fqns, stages, 1, 1),
                             parallel::pipeline::generate_schedule(schedule, ranks, stages, 8), rank};
  };
  int64_t parameters = 0;
  for (int rank = 0; rank < 4; ++rank) {
    o.pipeline = placement("1F1B", rank);
    const MemoryEstimate e = estimate_memory(config, o);
    parameters += e.parameters;
    EXPECT_EQ(e.model_parameters, whole.parameters);
    EXPECT_EQ(e.loss_bytes > 0, rank == 3) << rank;
    // 1F1B: rank r keeps (ranks - r) micro-batches in flight.
    EXPECT_EQ(e.in_flight_microbatches, 4 - rank) << rank;
  }
  EXPECT_EQ(parameters, whole.parameters);
  // 32 layers + 2 over 4 stages of 8 (the first two take the remainder): the first stage has 8 layers.
  o.pipeline = placement("1F1B", 0);
  EXPECT_DOUBLE_EQ(estimate_memory(config, o).activation_bytes, 4 * 8 * block);
  o.pipeline = placement("GPipe", 0);
  EXPECT_DOUBLE_EQ(estimate_memory(config, o).activation_bytes, 8 * 8 * block);
}

}  // namespace memory_estimate_test
}  // namespace titan::models
