// Saving and loading a job's full training state as sharded checkpoints
// (format: checkpoint/checkpoint_metadata.h). Each rank writes the boxes it
// is the first holder of to its own data file; rank 0 merges what every rank
// wrote into metadata.json and publishes the folder atomically. An async save
// copies the state to host memory at the step boundary and writes it in a
// background thread that issues no collectives: ranks learn that every write
// is done from the flag all-reduce the trainer runs at each step boundary
// anyway (preemption), and only then does rank 0 publish.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/comm/device_mesh.h"
#include "titan/core/tensor.h"
#include "titan/train/job_config.h"

namespace titan::train {

// A tensor of the training state as this rank holds it: a box of a global tensor.
struct StateTensor {
  std::string name;  // "model.<fqn>", "optimizer.exp_avg.<fqn>", "optimizer.exp_avg_sq.<fqn>"
  std::string part;  // "model" or "optimizer"
  Tensor tensor;     // live, contiguous, on the host
  std::vector<int64_t> global_shape, offsets;
  bool write = true;  // this rank saves the box (replicas leave it to their first holder)
};

class Checkpointer {
 public:
  Checkpointer(const JobConfig& config, const comm::DeviceMesh& mesh);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  const std::string& root() const { return root_; }

  // Saves `step`: `state` is the job's non-tensor state (rank 0's is kept),
  // `rank_state` this rank's (its data loader). Every rank calls it. Returns
  // the seconds the caller was held up.
  double save(int64_t step, const std::vector<StateTensor>& tensors, const nlohmann::json& state,
              const nlohmann::json& rank_state, bool async);
  // Every rank, once per step: returns whether any rank asked to stop, and
  // publishes a finished async save.
  bool end_of_step(bool stop_requested);
  // Waits for a pending save and publishes it (every rank).
  void wait();

  struct Loaded {
    nlohmann::json state;               // the job state, plus "dataloader": {dp rank: state}
    std::vector<std::string> contents;  // parts present: model, optimizer, ...
    uint64_t bytes_read = 0;
  };
  // Fills every tensor whose part is in `parts` from a complete checkpoint
  // folder, each rank reading only the rows overlapping its boxes. Errors name
  // the folder, file and tensor. A checkpoint tensor outside `model_names`
  // (default: the names of `tensors`) means a different model; a pipeline
  // rank holds only its stages' tensors and passes the whole model's names.
  static Loaded load(const std::string& folder, const std::vector<StateTensor>& tensors,
                     const std::vector<std::string>& parts, const std::set<std::string>* model_names = nullptr);

 private:
  void write_rank_files(int64_t step, const std::vector<StateTensor>& tensors, const nlohmann::json& rank_state);
  void publish();
  // Forgets the save in flight and removes its staging folder (after a failure).
  void discard_pending();
  // Copies what this rank writes into snapshot_ (reusing its buffers when the state has the same layout).
  void take_snapshot(const std::vector<StateTensor>& tensors);

  JobConfig config_;
  const comm::DeviceMesh& mesh_;
  std::string root_;
  int rank_ = 0, world_ = 1;
  // The save in flight (written locally or not yet published).
  bool pending_ = false;
  int64_t pending_step_ = 0;
  nlohmann::json pending_state_;
  std::thread writer_;
  // The host copy an async save writes from, kept between saves: copying into
  // memory already mapped costs a memcpy, where fresh memory would also cost
  // a page fault per 4 KiB, which on a CPU host is most of the stall.
  std::vector<StateTensor> snapshot_;
  std::atomic<bool> written_{false};
  std::exception_ptr writer_error_;
};

}  // namespace titan::train
