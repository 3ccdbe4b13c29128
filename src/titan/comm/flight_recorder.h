// The flight recorder: the last N collectives this process issued, kept in a
// fixed ring, written out as JSON when the job is in trouble (a collective
// timed out here or on a peer, a fatal error under a launcher, SIGUSR1).
// Each rank writes its own `<folder>/rank_<world rank>.json`; `titan debug
// flight-recorder <folder>` lines the ranks' dumps up and names the first
// collective they disagree on or that some rank never reached.
//
// Process groups register themselves (name, backend, world ranks) when they are
// created, so the analyser knows which ranks must take part in each group's
// collectives; every collective then goes through record() (queued), start()
// and complete(). Off until configure() gives it a capacity: a job that never
// configures it records nothing and pays one atomic load per collective.
// The dump's data and its JSON form are in flight_dump.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "titan/comm/flight_dump.h"
#include "titan/core/tensor.h"

namespace titan::comm {

// The call's description from its tensors (`output` is `input` again for in-place ops).
CommCall describe_call(CommOp op, const Tensor& input, const Tensor& output, int reduce_op = -1, int peer = -1);

class FlightRecorder {
 public:
  // The process's recorder: what process groups record into and dumps write.
  static FlightRecorder& instance();
  FlightRecorder() = default;
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Keeps the last `capacity` records (0 = off) and dumps into `folder`.
  // Clears the ring; group registrations stay.
  void configure(int64_t capacity, std::string folder);
  bool enabled() const { return capacity_.load(std::memory_order_relaxed) > 0; }
  std::string folder() const;

  // A new group; returns its index for record(). Called whether or not the
  // recorder is on (groups outlive a later configure()).
  int register_group(const std::string& name, const std::string& backend, std::vector<int> world_ranks);
  // Marks a registered group as spanning nodes (or not): its later records say they crossed nodes.
  void set_spans_nodes(int group, bool spans);

  // A call issued on `group`: returns its handle for start()/complete() (0 when off).
  uint64_t record(int group, uint64_t sequence, const CommCall& call);
  // No-ops for handle 0 and for records the ring has already overwritten.
  void start(uint64_t handle);
  void complete(uint64_t handle);

  // The current state, records oldest first; rank and world size from MPI
  // when it is running, else 0 and 1.
  FlightDump snapshot(const std::string& reason) const;
  // Writes snapshot(reason) to flight_dump_path(folder, rank), atomically
  // (temporary file, then rename). Returns the path, or "" when off. Never
  // throws: it runs on the way down from other failures (then prints why).
  // A `final` dump is the one of a rank going down (its timeout, its fatal
  // error): later non-final ones (a peer's stall census question, SIGUSR1)
  // keep it rather than replace its reason.
  std::string dump(const std::string& reason, bool final = false);

 private:
  void set_state(uint64_t handle, CommState state);

  mutable std::mutex mutex_;
  std::atomic<int64_t> capacity_{0};
  std::string folder_;
  std::vector<FlightRecord> ring_;  // slot of record id i: i % capacity
  uint64_t next_id_ = 0;            // the id the next record gets
  uint64_t first_id_ = 0;           // the first id since configure()
  std::vector<FlightGroup> groups_;
  std::mutex dump_mutex_;       // one dump at a time (signal thread, census thread, failing thread)
  bool final_written_ = false;  // under dump_mutex_
};

}  // namespace titan::comm
