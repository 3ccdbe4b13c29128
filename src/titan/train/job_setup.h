// Job set-up, each part built from its config section (TorchTitan's
// build-from-config pattern): the device mesh, the data loader, AdamW and
// its learning-rate schedule, and the micro-batches a step accumulates. The
// model has its own builder (train/job_model.h).
#pragma once

#include <memory>

#include "titan/comm/device_mesh.h"
#include "titan/data/data_loader.h"
#include "titan/models/decoder.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_schedule.h"
#include "titan/train/job_config.h"

namespace titan::train {

// comm.mode = "fake_backend": this process rehearses one rank of a larger job.
bool is_rehearsal(const JobConfig& config);
// The process that prints and writes the job's reports: the world's rank 0,
// or the one process of a rehearsal, whatever rank it plays.
bool reports_for_job(const JobConfig& config, const comm::DeviceMesh& mesh);

// training.device, checked: a device this process can train on.
Device training_device(const JobConfig& config);

// The mesh of parallelism.* over the world (collective; checked against the
// world size and against what the device's backend supports). On GPUs device
// tensors travel through NCCL and the host's small agreements through MPI.
// A rehearsal's world is a comm::FakeProcessGroup of comm.fake_world_size
// ranks, checked exactly as a real world of that size would be.
std::unique_ptr<comm::DeviceMesh> build_device_mesh(const JobConfig& config, Device device);

// The job's dataset (training.*, validation.*, chat.*) for this rank's
// data-parallel coordinate.
std::unique_ptr<data::DataLoader> build_data_loader(const JobConfig& config, const comm::DeviceMesh& mesh);

// Micro-batches per step: training.global_batch_size over local_batch_size x
// the data-parallel ranks (1 when no global size is set).
int64_t micro_batches_per_step(const JobConfig& config, const comm::DeviceMesh& mesh);

// AdamW (optimizer.*) over `model`'s trainable parameters: frozen ones (LoRA's
// base weights) get no gradient and no state.
std::unique_ptr<optim::AdamW> build_optimizer(const OptimizerSection& section, nn::Module& model);

// lr_scheduler.* over training.steps. As TorchTitan, a warmup longer than the
// run is cut to the run, and said so (on rank 0).
optim::LrSchedule build_lr_schedule(const JobConfig& config, bool reports);

}  // namespace titan::train
