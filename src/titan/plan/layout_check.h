// The trainer's refusals of a layout, written as arithmetic: each rule names
// the check in the trainer it mirrors, so that enumerate_layouts proposes
// exactly what `titan train` accepts without building anything.
// tests/plan/layout_enumeration_test.cpp holds these rules against the
// trainer's own set-up (validate, the device mesh, the job's model) on the
// rehearsal backend.
#pragma once

#include <string>

#include "titan/plan/layout.h"

namespace titan::plan {

// Why the trainer would refuse the layout's degrees (pp, dp_replicate,
// dp_shard, cp, tp, ep) for this model, sequence and cluster, whatever the
// schedule and batch; empty when it accepts them.
std::string layout_degrees_refusal(const Layout& layout, const PlanRequest& request,
                                   const models::DecoderConfig& config);

// Why it would refuse the layout's pipeline (schedule, stages, micro-batches)
// given accepted degrees; empty when it accepts it or pp is 1.
std::string layout_pipeline_refusal(const Layout& layout, const models::DecoderConfig& config);

// Why it would refuse the layout's batch (local size, sequence length,
// accumulation); empty when it accepts it.
std::string layout_batch_refusal(const Layout& layout, const PlanRequest& request);

// All three, in that order: the first refusal, or empty.
std::string layout_refusal(const Layout& layout, const PlanRequest& request, const models::DecoderConfig& config);

}  // namespace titan::plan
