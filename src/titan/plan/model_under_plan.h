// The model a plan is made for: its family, config tree and FLOPs per token,
// and each top-level module's parameter count, counted once on the meta
// device (nothing allocated), which is what FSDP gathers and reduces per unit.
#pragma once

#include <string>
#include <vector>

#include "titan/models/model_spec.h"
#include "titan/plan/layout.h"

namespace titan::plan {

struct UnitParameters {
  std::string name;        // the module: tok_embeddings, layers.3, norm, output, mtp_layers.0
  double attention = 0.0;  // the attention (or linear-attention) projections
  double dense = 0.0;      // every parameter but the routed experts' (attention's included)
  double experts = 0.0;    // the routed experts' (split over expert parallelism, not tensor parallelism)
};

struct ModelUnderPlan {
  const models::ModelSpec* spec = nullptr;
  std::string family;  // titan's name (TorchTitan's names mapped)
  models::DecoderConfig config;
  double flops_per_token = 0.0;       // forward + backward at request.seq_len (MFU's numerator)
  std::vector<UnitParameters> units;  // in forward order
};

ModelUnderPlan model_under_plan(const PlanRequest& request);

}  // namespace titan::plan
