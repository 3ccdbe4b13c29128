// What one rank spends on each FSDP unit (a top-level module: the
// embeddings, each block, the norm, the output) of a layout, per micro-batch:
// its forward, backward (and its input and weight halves), recomputation,
// the collectives that sit in line with them, and the bytes FSDP gathers and
// reduces for it. The simulation in cost_model.cpp schedules them.
#pragma once

#include <string>
#include <vector>

#include "titan/parallel/pipeline_schedule.h"
#include "titan/plan/collective_cost.h"
#include "titan/plan/model_under_plan.h"

namespace titan::plan {

// A collective in line with compute (tensor parallelism, expert all-to-all,
// context parallelism), `calls` times per pass.
struct InlineCollective {
  std::string kind;  // tp, ep_all_to_all, cp_all_gather, cp_ring
  Collective collective = Collective::all_gather;
  double bytes = 0.0;
  int64_t calls = 1;
  // > 0: the collective runs under this much compute (ring attention's
  // passes under the attention kernel); only what outlasts it is exposed.
  double hidden_under_seconds = 0.0;
};

struct UnitPass {
  double compute_seconds = 0.0;
  std::vector<InlineCollective> collectives;
  UnitPass& operator+=(const UnitPass& other);
};

struct UnitCost {
  std::string name;
  UnitPass forward, backward, backward_input, backward_weight, recompute;
  // FSDP all-gather's output (the unit in the compute dtype) and
  // reduce-scatter's input (its gradients, reduced in f32): the dense
  // parameters over dp_shard x cp, and the routed experts, which expert
  // parallelism has split, over the dp_shard x cp / ep ranks of their own group.
  double gather_bytes = 0.0, reduce_bytes = 0.0;
  double expert_gather_bytes = 0.0, expert_reduce_bytes = 0.0;
  double parameters = 0.0;  // this rank's share of the unit before FSDP (split by TP and EP)
};

struct PipelineCostPlan {
  parallel::pipeline::Schedule schedule;
  std::vector<UnitCost> stages;  // each stage's units summed
  double send_bytes = 0.0;       // one micro-batch's boundary activation
};

// Each module's parameters, counted on a meta-device build.
std::vector<UnitParameters> count_unit_parameters(const models::ModelSpec& spec, const models::DecoderConfig& config);

class LayoutCosts {
 public:
  LayoutCosts(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
              const DeviceProfile& device);
  const std::vector<UnitCost>& units() const { return units_; }
  PipelineCostPlan pipeline() const;
  // AdamW over the rank's shard (and zeroing the gradients).
  double optimizer_seconds() const;
  // Per step, outside the units: the CPU's host work between steps (none on accelerators, which queue ahead).
  double step_overhead_seconds() const;

 private:
  UnitCost block_cost(const UnitParameters& unit, const nn::TransformerBlockConfig& block) const;
  UnitCost embedding_cost(const UnitParameters& unit) const;
  UnitCost output_cost(const UnitParameters& unit) const;
  UnitCost norm_cost(const UnitParameters& unit) const;
  double gemm(double m, double n, double k) const;
  double memory_seconds(double bytes) const;
  double ops_seconds(double ops, double device_seconds) const;
  void set_fsdp_bytes(UnitCost& cost, const UnitParameters& unit) const;

  const ModelUnderPlan& model_;
  const PlanRequest& request_;
  const Layout& layout_;
  const DeviceProfile& device_;
  double tokens_ = 0.0;         // this rank's tokens per micro-batch
  double sequences_ = 0.0;      // sequences per micro-batch
  double element_bytes_ = 2.0;  // the compute dtype's
  double share_ = 1.0;          // CPU: this rank's share of the node's cores
  std::vector<UnitCost> units_;
};

}  // namespace titan::plan
