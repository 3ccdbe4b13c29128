// validation.*: the mean loss over the held-out split (validation.steps
// batches at most), each batch's loss weighted by its counted labels and
// summed over every data-, context-parallel and pipeline rank.
#pragma once

#include "titan/comm/device_mesh.h"
#include "titan/data/data_loader.h"
#include "titan/train/job_config.h"
#include "titan/train/job_model.h"
#include "titan/train/step_inputs.h"

namespace titan::train {

// Collective over the mesh's dp_cp and pp groups.
double validation_loss(const ValidationSection& section, data::DataLoader& loader, const StepInputsBuilder& inputs,
                       JobModel& job, const comm::DeviceMesh& mesh, Device device);

}  // namespace titan::train
