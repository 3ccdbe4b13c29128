// The step-time model (docs/planning.md): one training step of a layout
// simulated on the device profile, rank by rank. Each rank runs its pipeline
// schedule's actions (parallel/pipeline_schedule.h, the trainer's own
// schedules), each a sequence of per-layer compute and collectives on two
// streams, compute and communication, with the overlap titan schedules: FSDP
// gathers the next unit while one computes and reduce-scatters behind the
// backward; ring attention passes keys and values under the attention
// kernel; tensor-parallel and expert all-to-all collectives sit in line;
// pipeline sends wait for their receiver.
#pragma once

#include <string>
#include <vector>

#include "titan/plan/device_profile.h"
#include "titan/plan/layout.h"
#include "titan/plan/model_under_plan.h"
#include "titan/plan/step_prediction.h"
#include "titan/train/memory_check.h"

namespace titan::plan {

// One interval of the predicted timeline (what --simulate writes).
struct TimelineEvent {
  int rank = 0;          // the pipeline rank (one representative per pipeline stage group)
  int stream = 0;        // 0: compute, 1: communication
  std::string name;      // "layers.3 forward", "fsdp_all_gather layers.4", "bubble"
  std::string category;  // compute, recompute, comm, optimizer
  double start_seconds = 0.0, seconds = 0.0;
};

// The step time alone (memory left unset): a search costs every layout's
// time and checks memory, the dearer half, only for the fastest ones.
StepPrediction predict_step_time(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                                 const DeviceProfile& device, std::vector<TimelineEvent>* timeline = nullptr);
// Sets the prediction's memory fields (predict_memory) and whether it fits.
void add_memory(StepPrediction& prediction, const ModelUnderPlan& model, const PlanRequest& request,
                const DeviceProfile& device);

// The prediction for `layout`, time and memory, and (when `timeline` is given) its events.
StepPrediction predict_step(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                            const DeviceProfile& device, std::vector<TimelineEvent>* timeline = nullptr);

// The memory the layout's fullest rank needs at its peak: the trainer's own
// pre-flight estimate (train::job_memory_budget, every pipeline rank tried)
// of the job apply_layout describes; `available_bytes` is the device's.
train::MemoryBudget predict_memory(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                                   const DeviceProfile& device);

}  // namespace titan::plan
