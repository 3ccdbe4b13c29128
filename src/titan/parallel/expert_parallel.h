// Expert parallelism: a MoE layer's experts split over the mesh's ep group
// (rank r holds experts [r E/ep, (r+1) E/ep)), each rank routing its own
// tokens. The rows a rank sends to an expert travel to that expert's rank in
// one all-to-all (with splits), are computed there in expert order, and come
// back in a second all-to-all; backward runs the same exchanges reversed.
//
// Applied from outside the model: the experts' weights are cut to this rank's
// share and GroupedExperts gets a dispatcher; MoE code stays single-device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "titan/comm/process_group.h"
#include "titan/nn/moe.h"

namespace titan::parallel {

// Rows [N, ...]: input_splits[p] rows go to rank p, output_splits[p] rows
// arrive from it (in rank order). Backward: the reverse exchange.
Tensor all_to_all_rows(const Tensor& rows, const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits, const std::shared_ptr<comm::ProcessGroup>& group);

// Keeps this rank's experts of `moe` and installs the all-to-all dispatcher.
// `where` names the layer in errors (the experts must split evenly over ep).
void apply_expert_parallel(const std::string& where, nn::MoE& moe, const std::shared_ptr<comm::ProcessGroup>& ep);

}  // namespace titan::parallel
