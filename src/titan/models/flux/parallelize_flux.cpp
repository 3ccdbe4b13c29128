#include "titan/models/flux/parallelize_flux.h"

#include <string>
#include <vector>

#include "titan/core/error.h"
#include "titan/parallel/mixed_precision.h"

namespace titan::models::flux {
namespace {

// The blocks in the order they run, with their parameter-name prefixes.
std::vector<std::pair<std::string, nn::Block*>> blocks_of(FluxModel& model) {
  std::vector<std::pair<std::string, nn::Block*>> blocks;
  for (size_t i = 0; i < model.double_blocks.size(); ++i) {
    blocks.emplace_back("double_blocks." + std::to_string(i), model.double_blocks[i].get());
  }
  for (size_t i = 0; i < model.single_blocks.size(); ++i) {
    blocks.emplace_back("single_blocks." + std::to_string(i), model.single_blocks[i].get());
  }
  return blocks;
}

std::shared_ptr<parallel::Fsdp> apply_fsdp(FluxModel& model, const comm::DeviceMesh& mesh,
                                           const ParallelizeOptions& options) {
  // Context-parallel ranks hold the same parameters and see different image tokens: they shard with dp_shard.
  auto fsdp =
      std::make_shared<parallel::Fsdp>(mesh.group(comm::MeshDim::dp_shard_cp), mesh.group(comm::MeshDim::dp_replicate),
                                       parallel::FsdpOptions{options.param_dtype, options.reshard_after_forward,
                                                             options.device, options.precompute_float8_scales});
  // The embedders run first and the final layer last: one unit, gathered at
  // its first use and kept until the gradients are reduced (TorchTitan keeps
  // the final layer gathered after forward; the embedders are small).
  std::vector<nn::Parameter*> rest;
  for (auto& [name, parameter] : model.named_parameters()) {
    if (!name.starts_with("double_blocks.") && !name.starts_with("single_blocks.")) rest.push_back(parameter);
  }
  fsdp->add_unit("embedders, final_layer", rest);
  const std::vector<std::pair<std::string, nn::Block*>> blocks = blocks_of(model);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& [where, block] = blocks[i];
    std::vector<nn::Parameter*> parameters;
    for (auto& [name, parameter] : block->named_parameters()) parameters.push_back(parameter);
    // The last block's backward comes right after its forward: keep it gathered unless told to always reshard.
    const bool reshard =
        options.reshard_after_forward == parallel::ReshardPolicy::always ||
        (options.reshard_after_forward == parallel::ReshardPolicy::default_policy && i + 1 < blocks.size());
    fsdp->wrap_block(*block, {fsdp->add_unit(where, parameters)}, reshard);
  }
  return fsdp;
}

// Each cp rank holds a slice of the text tokens and a slice of the image
// tokens (train/flux/flux_batch.h); every position-wise piece of a block runs
// on them unchanged and the joint attention becomes ring attention. With no
// mask the keys' order is immaterial, so the ring's sequence (rank 0's text
// and image, then rank 1's, ...) gives the one-process attention; nothing is
// causal, so there is no imbalance for head-tail chunks to fix.
std::shared_ptr<parallel::RingAttention> apply_context_parallel(FluxModel& model, const comm::DeviceMesh& mesh,
                                                                const ParallelizeOptions& options) {
  const std::shared_ptr<comm::ProcessGroup>& cp = mesh.group(comm::MeshDim::cp);
  if (cp->size() == 1) return nullptr;
  auto ring = std::make_shared<parallel::RingAttention>(cp, options.context_parallel_rotate, /*balanced=*/false);
  model.set_attention_core([ring](const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                                  float scale) { return (*ring)(q, k, v, mask, scale); });
  return ring;
}

}  // namespace

parallel::ParallelizedModel parallelize_flux(FluxModel& model, const comm::DeviceMesh& mesh,
                                             const ParallelizeOptions& options) {
  const comm::ParallelDims& dims = mesh.dims();
  TITAN_CHECK(dims.tp == 1 && dims.pp == 1 && dims.ep == 1,
              "flux: tensor, pipeline and expert parallelism are not built for FLUX (got tp {}, pp {}, ep {}); "
              "train it with FSDP/HSDP (data_parallel_shard_degree, data_parallel_replicate_degree)",
              dims.tp, dims.pp, dims.ep);
  TITAN_CHECK(!options.selective_ops.enabled,
              "flux: activation_checkpoint.selective_ac_option = \"op\" is not built for FLUX; use mode \"full\", or "
              "\"selective\" with a block interval");
  parallel::ParallelizedModel parallelized(mesh, /*pipelined=*/false);
  std::vector<nn::Block*> blocks;
  for (const auto& [where, block] : blocks_of(model)) blocks.push_back(block);
  parallel::apply_activation_checkpointing(blocks, options.activation_checkpoint, options.selective_every);
  parallelized.ring_attention = apply_context_parallel(model, mesh, options);
  // Context-parallel ranks see different tokens of the same examples: their gradients are reduced like dp's.
  if (dims.dp() * dims.cp > 1) {
    parallelized.fsdp = apply_fsdp(model, mesh, options);
  } else {
    parallel::apply_mixed_precision(model, options.param_dtype);
  }
  return parallelized;
}

}  // namespace titan::models::flux
