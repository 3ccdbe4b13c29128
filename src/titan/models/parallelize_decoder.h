// Applied to a built Decoder from outside, per the job config: mixed
// precision (parameters materialised in a compute dtype, gradients flowing
// back to the f32 master weights) and activation checkpointing of blocks.
// The model definition stays single-device and precision-agnostic.
#pragma once

#include <string>

#include "titan/distributed/device_mesh.h"
#include "titan/distributed/fsdp.h"
#include "titan/models/decoder.h"

namespace titan::models {

// Every parameter reaches forward cast to `dtype` (no-op for f32).
void apply_mixed_precision(Decoder& model, DType dtype);

// mode "none", "full" (every block) or "selective" (every `every`-th block):
// those blocks keep only their input for backward and recompute the rest.
void apply_activation_checkpointing(Decoder& model, const std::string& mode, int64_t every);

// Tensor + sequence parallelism over the mesh's tp group (the plan for this
// decoder): q/k/v and w1/w3 column-parallel, wo and w2 row-parallel, norms
// and embeddings replicated, the output projection split by vocabulary rows
// with a vocabulary-parallel loss. Apply before activation checkpointing and FSDP.
void apply_tensor_parallel(Decoder& model, const distributed::DeviceMesh& mesh);

// Data parallelism over the mesh's dp_shard and dp_replicate dims: one FSDP
// unit per block plus one for the embeddings, final norm and output (the
// root, gathered first and kept until the backward ends). Parameters are
// materialised in `param_dtype` by the gather itself. Apply after activation
// checkpointing so the gather wraps the checkpointed block.
std::shared_ptr<distributed::Fsdp> apply_fsdp(Decoder& model, const distributed::DeviceMesh& mesh, DType param_dtype,
                                              distributed::ReshardPolicy reshard_after_forward);

}  // namespace titan::models
