// After each step, the mixture-of-experts layers' load: tokens per expert
// summed over every rank that routed its own tokens (the data- and context-
// parallel ranks, and under sequence parallelism the tensor-parallel ones),
// fed to each layer's aux-loss-free bias update (MoE::update_expert_bias) and
// summarised as the busiest expert over the mean, then cleared for the next step.
#pragma once

#include <cstdint>
#include <optional>

#include "titan/comm/device_mesh.h"
#include "titan/models/decoder.h"

namespace titan::models {

struct ExpertLoad {
  double mean = 0.0;   // busiest over mean tokens, averaged over MoE layers
  double worst = 0.0;  // at the worst layer
  int64_t worst_layer = -1;
};

// Collective over dp_cp and tp (and pp, where other stages hold MoE layers).
// Nothing (and no collective) for a model without MoE layers.
std::optional<ExpertLoad> balance_expert_load(Decoder& model, const comm::DeviceMesh& mesh);

}  // namespace titan::models
