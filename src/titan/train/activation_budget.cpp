#include "titan/train/activation_budget.h"

#include <fmt/format.h>

#include <vector>

#include "titan/train/memory_check.h"

namespace titan::train {

namespace activation_budget_detail {

struct Plan {
  std::string mode;
  int64_t every = 2;
  bool ops = false;
  std::string describe() const {
    if (mode != "selective") return mode;
    return ops ? "selective (per op, TorchTitan's policy)" : fmt::format("selective (one block in {})", every);
  }
};

double needed_bytes(JobConfig config, const Plan& plan, const models::DecoderConfig& model,
                    const comm::ParallelDims& dims, Device device) {
  config.activation_checkpoint.mode = plan.mode;
  config.activation_checkpoint.selective_every = plan.every;
  config.activation_checkpoint.selective_ops = plan.ops;
  return job_memory_budget(config, model, dims, device).needed_bytes;
}

}  // namespace activation_budget_detail

std::string resolve_activation_memory_budget(JobConfig& config, const models::DecoderConfig& model,
                                             const comm::ParallelDims& dims, Device device) {
  using activation_budget_detail::Plan;
  ActivationCheckpointSection& ac = config.activation_checkpoint;
  if (ac.mode != "memory_budget") return "";
  // Every plan titan has, from keeping everything to recomputing every block.
  std::vector<Plan> plans{{"none"}};
  for (int64_t every = model.n_layers(); every >= 2; --every) plans.push_back({"selective", every, false});
  plans.push_back({"selective", 2, true});
  plans.push_back({"full"});
  std::vector<double> needs;
  needs.reserve(plans.size());
  for (const Plan& plan : plans) {
    needs.push_back(activation_budget_detail::needed_bytes(config, plan, model, dims, device));
  }
  const double none = needs.front(), full = needs.back();
  const double target = full + ac.memory_budget * (none - full);
  size_t chosen = plans.size() - 1;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (needs[i] <= target * (1.0 + 1e-12) && needs[i] > needs[chosen]) chosen = i;
  }
  const double budget = ac.memory_budget;
  ac.mode = plans[chosen].mode;
  ac.selective_every = plans[chosen].every;
  ac.selective_ops = plans[chosen].ops;
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "activation_checkpoint.memory_budget {}: {} (needs about {:.1f} MiB per rank; {:.1f} with full checkpointing, "
      "{:.1f} with none)",
      budget, plans[chosen].describe(), needs[chosen] / kMiB, full / kMiB, none / kMiB);
}

}  // namespace titan::train
