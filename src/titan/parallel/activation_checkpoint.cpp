#include "titan/parallel/activation_checkpoint.h"

#include <memory>

#include "titan/autograd/checkpoint.h"
#include "titan/autograd/offload.h"
#include "titan/nn/linear.h"

namespace titan::parallel {

ActivationCheckpointMode parse_activation_checkpoint_mode(const std::string& name) {
  if (name == "none") return ActivationCheckpointMode::none;
  if (name == "full") return ActivationCheckpointMode::full;
  if (name == "selective") return ActivationCheckpointMode::selective;
  if (name == "offload") return ActivationCheckpointMode::offload;
  fail("activation checkpointing mode '{}' is not one of none, full, selective, offload", name);
}

namespace {

// The policy for one block: the weight shapes of its Linears named by `fqns`.
autograd::SavedOpPolicy saved_op_policy(nn::Block& block, const std::vector<std::string>& fqns) {
  autograd::SavedOpPolicy policy;
  for (const auto& [name, module] : block.named_modules()) {
    bool named = false;
    for (const std::string& fqn : fqns) named = named || name.find(fqn) != std::string::npos;
    if (!named) continue;
    const auto* linear = dynamic_cast<const nn::Linear*>(module);
    TITAN_CHECK(linear != nullptr,
                "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns: '{}' is not a Linear", name);
    policy.recompute_mm_shapes.insert({linear->config.out_features, linear->config.in_features});
  }
  return policy;
}

}  // namespace

void apply_activation_checkpointing(const std::vector<nn::Block*>& blocks, ActivationCheckpointMode mode, int64_t every,
                                    const SelectiveOps& ops) {
  switch (mode) {
    case ActivationCheckpointMode::none:
      return;
    case ActivationCheckpointMode::offload: {
      auto offloader = std::make_shared<autograd::ActivationOffloader>(static_cast<int64_t>(blocks.size()));
      for (size_t i = 0; i < blocks.size(); ++i) {
        blocks[i]->set_runner([offloader, i](const nn::BlockBody& body, const Tensor& x) {
          return offloader->run(static_cast<int64_t>(i), body, x);
        });
      }
      return;
    }
    case ActivationCheckpointMode::full:
    case ActivationCheckpointMode::selective: {
      TITAN_CHECK(every > 0, "activation checkpointing: selective_every must be > 0, got {}", every);
      if (mode == ActivationCheckpointMode::selective && ops.enabled) {
        for (nn::Block* block : blocks) {
          const auto policy =
              std::make_shared<const autograd::SavedOpPolicy>(saved_op_policy(*block, ops.force_recompute_mm_fqns));
          block->set_runner([policy](const nn::BlockBody& body, const Tensor& x) {
            return autograd::checkpoint(
                [body](const std::vector<Tensor>& in) { return std::vector<Tensor>{body(in[0])}; }, {x},
                policy.get())[0];
          });
        }
        return;
      }
      const nn::BlockRunner checkpointed = [](const nn::BlockBody& body, const Tensor& x) {
        return autograd::checkpoint([body](const std::vector<Tensor>& in) { return std::vector<Tensor>{body(in[0])}; },
                                    {x})[0];
      };
      for (size_t i = 0; i < blocks.size(); ++i) {
        if (mode == ActivationCheckpointMode::full || i % static_cast<size_t>(every) == 0) {
          blocks[i]->set_runner(checkpointed);
        }
      }
      return;
    }
  }
}

}  // namespace titan::parallel
