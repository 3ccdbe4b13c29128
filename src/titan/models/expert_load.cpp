#include "titan/models/expert_load.h"

#include <algorithm>

#include "titan/core/copy.h"

namespace titan::models {

using comm::MeshDim;

std::optional<ExpertLoad> balance_expert_load(Decoder& model, const comm::DeviceMesh& mesh) {
  const std::vector<nn::TransformerBlockConfig>& configs = model.config.layers;
  if (std::none_of(configs.begin(), configs.end(), [](const auto& layer) { return layer.moe.has_value(); })) {
    return std::nullopt;
  }
  // Each layer's busiest expert over the mean load; -1 for layers another pipeline stage holds.
  std::vector<double> ratios(configs.size(), -1.0);
  for (size_t i = 0; i < model.layers->size(); ++i) {
    nn::MoE* moe = (*model.layers)[i]->moe.get();
    if (moe == nullptr) continue;
    Tensor total = moe->tokens_per_expert->clone();
    for (MeshDim dim : {MeshDim::dp_cp, MeshDim::tp}) {
      if (mesh.size(dim) > 1) mesh.group(dim)->all_reduce(total, comm::ReduceOp::sum)->wait();
    }
    const std::vector<float> load = total.to_floats();
    double sum = 0.0, busiest = 0.0;
    for (float tokens : load) {
      sum += tokens;
      busiest = std::max(busiest, static_cast<double>(tokens));
    }
    ratios[static_cast<size_t>(std::stoll(model.layers->key(i)))] =
        sum > 0 ? busiest / (sum / static_cast<double>(load.size())) : 0.0;
    moe->update_expert_bias(total);
    titan::fill_(*moe->tokens_per_expert, 0.0);
  }
  // Multi-token prediction depths keep their expert bias: TorchTitan's
  // balancing hook walks `layers` only. Their counts are cleared all the same.
  for (size_t k = 0; model.mtp_layers && k < model.mtp_layers->size(); ++k) {
    nn::MoE* moe = (*model.mtp_layers)[k]->moe.get();
    if (moe != nullptr) titan::fill_(*moe->tokens_per_expert, 0.0);
  }
  if (mesh.size(MeshDim::pp) > 1) {
    const std::vector<float> mine(ratios.begin(), ratios.end());
    Tensor all = Tensor::from_floats(mine, {static_cast<int64_t>(mine.size())});
    mesh.group(MeshDim::pp)->all_reduce(all, comm::ReduceOp::max)->wait();
    const std::vector<float> combined = all.to_floats();
    ratios.assign(combined.begin(), combined.end());
  }
  ExpertLoad load;
  double ratio_sum = 0.0;
  int64_t moe_layers = 0;
  for (size_t layer = 0; layer < ratios.size(); ++layer) {
    if (ratios[layer] < 0) continue;
    ratio_sum += ratios[layer];
    if (moe_layers++ == 0 || ratios[layer] > load.worst) {
      load.worst = ratios[layer];
      load.worst_layer = static_cast<int64_t>(layer);
    }
  }
  if (moe_layers == 0) return std::nullopt;
  load.mean = ratio_sum / static_cast<double>(moe_layers);
  return load;
}

}  // namespace titan::models
