// Activation checkpointing and offload of a model's blocks (nn::Block), installed as
// each block's runner (nn::BlockRunner): the model never knows. Model-agnostic:
// it takes the blocks, whatever model holds them.
#pragma once

#include <string>
#include <vector>

#include "titan/nn/block.h"

namespace titan::parallel {

enum class ActivationCheckpointMode {
  none,
  full,       // every block keeps only its input and recomputes the rest in backward
  selective,  // every `every`-th block does
  offload,    // every block's saved activations go to host memory and come back for backward
};
ActivationCheckpointMode parse_activation_checkpoint_mode(const std::string& name);

// Per-op selective checkpointing (TorchTitan's selective_ac_option = "op",
// autograd/saved_ops.h): with mode selective, every block is checkpointed
// keeping the outputs of attention, the sequence-parallel reduce-scatter and
// every other matmul, instead of every `every`-th block whole. Linears whose
// name in the block contains one of `force_recompute_mm_fqns` (TorchTitan's
// per_op_sac_force_recompute_mm_shapes_by_fqns: the MoE router's gate) are
// always recomputed: matmuls with their weight's shape are not kept.
struct SelectiveOps {
  bool enabled = false;
  std::vector<std::string> force_recompute_mm_fqns = {"moe.router.gate"};
};

void apply_activation_checkpointing(const std::vector<nn::Block*>& blocks, ActivationCheckpointMode mode, int64_t every,
                                    const SelectiveOps& ops = {});

}  // namespace titan::parallel
