// The decoder's parallelize plan, applied to a built model from outside per
// the job config, in TorchTitan's order: tensor + sequence parallelism and
// expert parallelism, context parallelism (every attention layer's core
// becomes ring attention over cp), activation checkpointing, then FSDP over
// dp_shard x cp (whose gather
// materialises parameters in the compute dtype) or, without data
// parallelism, plain mixed precision. The plan is written by module kind
// (what an Attention, a FeedForward or a MoE block gets), never by walking a
// particular model's members, so any decoder built from block configs takes it.
#pragma once

#include <memory>

#include "titan/comm/device_mesh.h"
#include "titan/models/decoder.h"
#include "titan/parallel/activation_checkpoint.h"
#include "titan/parallel/context_parallel.h"
#include "titan/parallel/fsdp.h"
#include "titan/parallel/parallelized_model.h"

namespace titan::models {

struct ParallelizeOptions {
  DType param_dtype = DType::f32;  // training.mixed_precision_param
  parallel::ActivationCheckpointMode activation_checkpoint = parallel::ActivationCheckpointMode::none;
  int64_t selective_every = 2;
  parallel::SelectiveOps selective_ops;  // mode selective: TorchTitan's per-op policy instead of every N-th block
  parallel::ReshardPolicy reshard_after_forward = parallel::ReshardPolicy::default_policy;
  parallel::RotateMethod context_parallel_rotate = parallel::RotateMethod::allgather;
  bool context_parallel_load_balance = true;  // head-tail chunks
  // The model holds pipeline stages: FSDP then reduces once per pass (not as
  // each unit completes) and, by default, keeps blocks gathered for the
  // step's many micro-batches, as TorchTitan does.
  bool pipelined = false;
  // Where the parameters live once materialised (the model may still be on the meta device).
  Device device = Device::cpu();
  // quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp (with the float8 all-gather).
  bool precompute_float8_scales = false;
};

parallel::ParallelizedModel parallelize_decoder(Decoder& model, const comm::DeviceMesh& mesh,
                                                const ParallelizeOptions& options);

// The plan `titan generate` runs under on a mesh (tp x dp_shard ranks):
// tensor parallelism without sequence parallelism, since decoding feeds one
// token at a time and one token does not split over ranks. Attention heads
// and FFN hidden units are split as in training and each module's partial
// output is summed over tp; embeddings, norms, the output projection and
// MoE blocks stay whole on every tp rank, so every rank computes the same
// logits. With dp_shard > 1 FSDP shards every weight and gathers one block
// at a time, in f32, freeing it after the block (the root's embeddings and
// output stay gathered). No autograd.
parallel::ParallelizedModel parallelize_decoder_for_generation(Decoder& model, const comm::DeviceMesh& mesh);

// The tensor-parallel plan alone, over the mesh's tp group: attention's q/k/v
// and a dense FFN's w1/w3 split by output features (column-parallel), their
// output projections by input features (row-parallel), each such module's
// input gathered from the sequence-parallel residual stream and its output
// reduce-scattered back; norms, embeddings and MoE blocks (router and experts
// on each rank's own tokens) replicated; the output projection split by
// vocabulary rows with a vocabulary-parallel loss. Under expert parallelism
// the MoE blocks' experts are then split over ep (parallel/expert_parallel.h),
// each tp rank exchanging its own tokens with its ep peers.
void apply_tensor_parallel(Decoder& model, const comm::DeviceMesh& mesh);

}  // namespace titan::models
