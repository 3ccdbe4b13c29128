#include "titan/comm/flight_recorder.h"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "titan/comm/process_group.h"
#include "titan/core/error.h"

namespace titan::comm {
namespace {

// The dump spells reduce ops by their value (comm_reduce_op_name): keep the two in step.
static_assert(static_cast<int>(ReduceOp::sum) == 0 && static_cast<int>(ReduceOp::avg) == 1 &&
                  static_cast<int>(ReduceOp::max) == 2,
              "flight_dump.cpp names ReduceOp values 0, 1, 2 as sum, avg, max");

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// Rank and size in MPI_COMM_WORLD when MPI runs: the dump may be written from
// the signal thread, which must not be the one to start the World.
void world_position(int* rank, int* size) {
  *rank = 0;
  *size = 1;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
  }
}

}  // namespace

CommCall describe_call(CommOp op, const Tensor& input, const Tensor& output, int reduce_op, int peer) {
  CommCall call;
  call.op = op;
  call.reduce_op = static_cast<int8_t>(reduce_op);
  call.dtype = input.dtype();
  call.numel_in = input.numel();
  call.numel_out = output.numel();
  call.bytes_in = static_cast<int64_t>(input.nbytes());
  call.bytes_out = static_cast<int64_t>(output.nbytes());
  call.peer = peer;
  return call;
}

FlightRecorder& FlightRecorder::instance() {
  // Never destroyed: groups and the signal thread may record or dump while
  // static destructors run at exit.
  static FlightRecorder* recorder = new FlightRecorder();
  return *recorder;
}

void FlightRecorder::configure(int64_t capacity, std::string folder) {
  TITAN_CHECK(capacity >= 0, "comm.trace_buf_size {}: must be >= 0 (0 turns the flight recorder off)", capacity);
  std::lock_guard<std::mutex> lock(mutex_);
  ring_.assign(static_cast<size_t>(capacity), FlightRecord{});
  folder_ = folder.empty() ? std::string(".") : std::move(folder);
  first_id_ = next_id_;
  capacity_.store(capacity, std::memory_order_relaxed);
}

std::string FlightRecorder::folder() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return folder_;
}

int FlightRecorder::register_group(const std::string& name, const std::string& backend, std::vector<int> world_ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  FlightGroup group{name, backend, 0, std::move(world_ranks), 0, false};
  for (const FlightGroup& earlier : groups_) {
    if (earlier.name == group.name && earlier.backend == group.backend && earlier.ranks == group.ranks) {
      ++group.instance;
    }
  }
  groups_.push_back(std::move(group));
  return static_cast<int>(groups_.size()) - 1;
}

void FlightRecorder::set_spans_nodes(int group, bool spans) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (group >= 0 && static_cast<size_t>(group) < groups_.size())
    groups_[static_cast<size_t>(group)].spans_nodes = spans;
}

uint64_t FlightRecorder::record(int group, uint64_t sequence, const CommCall& call) {
  if (!enabled()) return 0;
  const int64_t now = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  if (ring_.empty()) return 0;
  const uint64_t id = ++next_id_;  // ids start at 1: handle 0 means "not recorded"
  FlightRecord& slot = ring_[id % ring_.size()];
  slot = FlightRecord{};
  slot.id = id;
  slot.group = group;
  slot.sequence = sequence;
  slot.call = call;
  slot.state = CommState::queued;
  slot.queued_us = now;
  const bool known = group >= 0 && static_cast<size_t>(group) < groups_.size();
  if (known) slot.cross_node = groups_[group].spans_nodes;
  if (known && !is_point_to_point(call.op)) {
    groups_[group].last_sequence = std::max(groups_[group].last_sequence, sequence);
  }
  return id;
}

void FlightRecorder::start(uint64_t handle) { set_state(handle, CommState::started); }

void FlightRecorder::complete(uint64_t handle) { set_state(handle, CommState::completed); }

void FlightRecorder::set_state(uint64_t handle, CommState state) {
  if (handle == 0) return;
  const int64_t now = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  if (ring_.empty()) return;
  FlightRecord& slot = ring_[handle % ring_.size()];
  if (slot.id != handle || slot.state >= state) return;  // overwritten since, or already further
  // A collective seen completed without being seen started (a poll that
  // missed the start) started no later than that.
  if (slot.started_us == 0) slot.started_us = now;
  if (state == CommState::completed) slot.completed_us = now;
  slot.state = state;
}

FlightDump FlightRecorder::snapshot(const std::string& reason) const {
  FlightDump dump;
  world_position(&dump.rank, &dump.world_size);
  dump.reason = reason;
  dump.host = host_name();
  dump.pid = static_cast<int64_t>(getpid());
  dump.time_us = now_us();
  std::lock_guard<std::mutex> lock(mutex_);
  dump.capacity = static_cast<int64_t>(ring_.size());
  dump.groups = groups_;
  if (!ring_.empty()) {
    const uint64_t last = next_id_;
    const uint64_t first = std::max(first_id_ + 1, last >= ring_.size() ? last - ring_.size() + 1 : uint64_t{1});
    dump.records.reserve(static_cast<size_t>(last + 1 - first));
    for (uint64_t id = first; id <= last; ++id) dump.records.push_back(ring_[id % ring_.size()]);
  }
  return dump;
}

std::string FlightRecorder::dump(const std::string& reason, bool final) {
  if (!enabled()) return "";
  std::lock_guard<std::mutex> dumping(dump_mutex_);
  if (final_written_) {
    int rank = 0, size = 1;
    world_position(&rank, &size);
    return flight_dump_path(folder(), rank);
  }
  FlightDump state;
  std::string path;
  try {
    state = snapshot(reason);
    const std::string folder = this->folder();
    path = flight_dump_path(folder, state.rank);
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    TITAN_CHECK(!error, "cannot create {}: {}", folder, error.message());
    const std::string temporary = fmt::format("{}.tmp.{}", path, state.pid);
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out << flight_dump_to_json(state);
      out.close();
      TITAN_CHECK(out.good(), "cannot write {}", temporary);
    }
    std::filesystem::rename(temporary, path, error);
    TITAN_CHECK(!error, "cannot rename {} to {}: {}", temporary, path, error.message());
    final_written_ = final;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "titan: rank %d: flight recorder: no dump (%s): %s\n", state.rank, reason.c_str(),
                 error.what());
    std::fflush(stderr);
    return "";
  }
  std::fprintf(stderr, "titan: rank %d: flight recorder: wrote the last %zu collectives to %s (%s)\n", state.rank,
               state.records.size(), path.c_str(), reason.c_str());
  std::fflush(stderr);
  return path;
}

}  // namespace titan::comm
