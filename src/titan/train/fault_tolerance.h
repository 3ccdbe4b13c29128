// Elastic replica groups (TorchTitan's fault_tolerance.*, after TorchFT's
// Manager): this job is replica group fault_tolerance.replica_id of
// fault_tolerance.group_size, each its own mpirun/srun job. Every step:
//   1. begin_step(): the group's rank 0 joins the quorum at `titan lighthouse`
//      (TORCHFT_LIGHTHOUSE) with the steps it has committed and tells its
//      group the result. Each rank rebuilds its Gloo group with the same
//      group-local rank of every live group when the quorum changed, and a
//      group behind the quorum's newest step receives weights, AdamW moments,
//      step, RNG and data position from a live peer (identical layouts).
//   2. average_gradients() (after backward, before clipping): this rank's
//      gradient shards averaged over the live groups. A peer group that dies
//      makes the all-reduce throw: the group agrees, re-forms the quorum
//      without it and averages again from its own gradients, so the step is
//      committed by the survivors with no restart.
//   3. The commit vote (inside average_gradients): rank 0 reports the group's
//      result to the lighthouse, which commits the step only if every member
//      of the quorum succeeded; otherwise every member discards the average
//      and averages again in a fresh quorum (comm/quorum.h).
// Semi-synchronous training (local_sgd, DiLoCo) is not built.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "titan/comm/device_mesh.h"
#include "titan/comm/quorum.h"
#include "titan/core/generator.h"
#include "titan/data/data_loader.h"
#include "titan/models/decoder.h"
#include "titan/optim/adamw.h"
#include "titan/train/job_config.h"
#include "titan/train/metrics.h"

namespace titan::comm {
class GlooProcessGroup;
class LighthouseClient;
}  // namespace titan::comm

namespace titan::train {

class FaultTolerance {
 public:
  // The state a group behind receives, by reference: the trainer owns it.
  struct Parts {
    int64_t& step;
    models::Decoder& model;
    optim::AdamW& optimizer;
    Generator& generator;
    data::DataLoader* loader;  // null when batches are injected
  };
  FaultTolerance(const JobConfig& config, const comm::DeviceMesh& mesh, Parts parts);
  ~FaultTolerance();

  // Every rank, before the step's batch is drawn.
  void begin_step();
  // Every rank, once the step's gradients are final in this group (before clipping).
  void average_gradients();
  // The step's fault-tolerance figures into its record.
  void report(StepMetrics& metrics);

 private:
  // Rank 0 joins the quorum (`fresh`: a peer was lost, so the Gloo group is
  // rebuilt even if the members look the same); every rank learns it,
  // rebuilds its Gloo group when the quorum id changed and takes part in a
  // recovery when a member is behind.
  void form_quorum(int64_t committed, bool fresh);
  void recover();
  nlohmann::json snapshot() const;

  const JobConfig& config_;
  const FaultToleranceSection& section_;
  const comm::DeviceMesh& mesh_;
  Parts parts_;
  int rank_ = 0;
  std::string address_;
  std::unique_ptr<comm::LighthouseClient> client_;  // the group's rank 0
  std::shared_ptr<comm::GlooProcessGroup> gloo_;
  int64_t gloo_quorum_id_ = -1;
  comm::Quorum quorum_;
  // The state at the start of this step (what a peer behind receives, even mid-step).
  nlohmann::json snapshot_;
  // This step's figures.
  int64_t steps_recovered_ = 0, retries_ = 0;
  double recover_seconds_ = 0.0, quorum_seconds_ = 0.0, commit_seconds_ = 0.0;
};

}  // namespace titan::train
