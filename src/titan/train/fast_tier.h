// The fast checkpoint tiers (checkpoint.local_interval): every rank keeps ALL
// the boxes it holds (replicated ones too: it must restore alone) and its job
// state in host memory (a folder under /dev/shm by default), written by a
// background thread from a snapshot taken at the step boundary; with
// checkpoint.local_replica the snapshot also travels over MPI to the partner
// rank (the same local rank on the next node), which keeps it in its own
// node's folder. A restart loads the newest step that every rank can restore
// from its own copy or its partner's, unless the persistent checkpoint is
// newer (train/training_state.h decides; docs/checkpoints.md).
//
//   <local_folder>/<node name>/rank-00002/step-000010/{tensors.bin, state.json, CHECKSUMS}
//   <local_folder>/<node name>/replica-of-rank-00000/step-000010/...
//
// A step folder is written as step-N.partial and renamed when every file is
// written and its CRC32C recorded: a folder named step-N is complete.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/train/checkpointer.h"
#include "titan/train/job_config.h"
#include "titan/train/restart_choice.h"

namespace titan::train {

// The fast tier's folder for this job (checkpoint.local_folder, or a default
// under /dev/shm unique to the dump folder), without the node name.
std::string fast_tier_root(const JobConfig& config);

class FastTier {
 public:
  FastTier(const JobConfig& config, const comm::DeviceMesh& mesh);
  ~FastTier();
  FastTier(const FastTier&) = delete;
  FastTier& operator=(const FastTier&) = delete;

  bool enabled() const { return interval_ > 0; }
  bool due(int64_t step) const { return enabled() && step % interval_ == 0; }
  bool has_partner() const { return partner_ >= 0; }

  struct Cost {
    double fast_seconds = 0.0;     // the snapshot (and waiting for the previous write)
    double replica_seconds = 0.0;  // the transfer to the partner
  };
  // Every rank: snapshots `tensors` (every box it holds) and the states,
  // exchanges with its partner, and writes both in the background.
  Cost save(int64_t step, const std::vector<StateTensor>& tensors, const nlohmann::json& state,
            const nlohmann::json& rank_state);
  // Waits for the write in flight; rethrows its error.
  void wait();

  // Every rank: agrees on the restart (collective) given the newest complete persistent step.
  RestartChoice choose(int64_t persistent_step);
  struct Restored {
    nlohmann::json state;     // the job state, "dataloader" as {dp rank: state}
    std::string description;  // for the "resumed at" line (rank 0's view)
    std::string folder;       // what this rank read
  };
  // Every rank: fills `tensors` from the chosen step (own copy, or the replica
  // its partner sends). Refuses a different layout, naming the difference.
  Restored restore(const RestartChoice& choice, const std::vector<StateTensor>& tensors);
  // Removes this rank's fast-tier steps (own and kept for its ward) after
  // `step`, where the job resumed: they belong to the timeline the failure
  // ended, and must not be mixed with the new one's at a later restart.
  void forget_after(int64_t step) const;

 private:
  std::string own_folder() const;
  std::string replica_folder(int ward_rank) const;  // in this rank's node folder
  // The complete steps of `folder` (named step-N: written and renamed).
  std::set<int64_t> complete_steps(const std::string& folder) const;
  // Reads a step folder's files and checks them against CHECKSUMS; false
  // (after a warning naming the file) when one does not match or is unreadable.
  bool load_verified(const std::string& step_folder, Tensor& blob, Tensor& meta) const;
  void write_step(const std::string& folder, int64_t step, const Tensor& blob, const std::string& meta) const;

  JobConfig config_;
  const comm::DeviceMesh& mesh_;
  int64_t interval_ = 0;
  int rank_ = 0, world_ = 1;
  std::string root_, node_name_;
  int partner_ = -1, ward_ = -1;  // partner keeps my replica; I keep my ward's
  std::vector<std::string> node_of_rank_name_;
  Tensor own_blob_, ward_blob_;
  // What choose() read and checked for the step it picked: this rank's copy, and its ward's replica.
  Tensor loaded_blob_, loaded_meta_, ward_loaded_blob_, ward_loaded_meta_;
  std::thread writer_;
  std::exception_ptr writer_error_;
};

// Test hook: TITAN_TEST_SIGKILL_AFTER_STEP=<step> kills this process (SIGKILL,
// no cleanup) after that step's saves, once the fast tier's write in flight
// landed, so tests see a known newest fast-tier step.
void kill_if_asked(int64_t step, FastTier& tier);

}  // namespace titan::train
