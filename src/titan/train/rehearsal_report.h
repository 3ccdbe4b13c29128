// What a rehearsal (comm.mode = "fake_backend") learned about the rank it
// played: its measured peak memory against the estimate, its time per step
// (all of it compute: the fake collectives cost nothing), and the collectives
// it issued per step, by mesh group and operation, with their sizes.
#pragma once

#include <string>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/train/job_config.h"
#include "titan/train/metrics.h"

namespace titan::train {

// `estimated_bytes`: the job memory check's figure for a rank.
std::string rehearsal_report(const JobConfig& config, const comm::DeviceMesh& mesh,
                             const std::vector<StepMetrics>& history, double estimated_bytes);

// Forgets the collectives set-up issued, so the report counts the steps' own.
void forget_setup_collectives(const comm::DeviceMesh& mesh);

// The most resident memory this process has held (VmHWM), in bytes; 0 where unknown.
double peak_resident_bytes();

}  // namespace titan::train
