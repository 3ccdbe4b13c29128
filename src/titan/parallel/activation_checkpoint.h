// Activation checkpointing and offload of transformer blocks, installed as
// each block's runner (nn::BlockRunner): the model never knows. Model-agnostic:
// it takes the blocks, whatever model holds them.
#pragma once

#include <string>
#include <vector>

#include "titan/nn/transformer_block.h"

namespace titan::parallel {

enum class ActivationCheckpointMode {
  none,
  full,       // every block keeps only its input and recomputes the rest in backward
  selective,  // every `every`-th block does
  offload,    // every block's saved activations go to host memory and come back for backward
};
ActivationCheckpointMode parse_activation_checkpoint_mode(const std::string& name);

void apply_activation_checkpointing(const std::vector<nn::TransformerBlock*>& blocks, ActivationCheckpointMode mode,
                                    int64_t every);

}  // namespace titan::parallel
