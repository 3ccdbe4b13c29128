// The flight recorder's dump: what one rank's `rank_<N>.json` holds, and its
// JSON form written and read back. Kept apart from the recorder (MPI, tensors)
// so that `titan debug flight-recorder` and the parser's fuzz target need only
// JSON, fmt and the dtype names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "titan/core/dtype.h"

namespace titan::comm {

enum class CommOp : uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  all_to_all,
  send,
  recv,
  barrier,
  split
};
const char* comm_op_name(CommOp op);
CommOp parse_comm_op(const std::string& name);  // throws titan::Error naming the text
// Point-to-point ops pair two ranks; they are numbered apart from the group's collectives.
inline bool is_point_to_point(CommOp op) { return op == CommOp::send || op == CommOp::recv; }

enum class CommState : uint8_t { queued, started, completed };
const char* comm_state_name(CommState state);
CommState parse_comm_state(const std::string& name);

// A CommCall's reduce_op as a dump spells it: "sum", "avg", "max" for the
// ReduceOp values 0, 1, 2 (process_group.h; flight_recorder.cpp checks the
// order), "?" for anything else. The dump names its own values so that it
// does not need the process groups.
const char* comm_reduce_op_name(int reduce_op);

// What one call does: the same on every member rank for a collective (but
// all_to_all, whose sizes are per rank).
struct CommCall {
  CommOp op = CommOp::barrier;
  int8_t reduce_op = -1;  // a ReduceOp, or -1 where the op does not reduce
  DType dtype = DType::u8;
  int64_t numel_in = 0, numel_out = 0;
  int64_t bytes_in = 0, bytes_out = 0;
  int32_t peer = -1;  // send/recv: the peer's rank in the group; broadcast: the root
};

// One entry of the ring. Plain data: recording copies it into a slot and
// allocates nothing.
struct FlightRecord {
  uint64_t id = 0;        // process-wide, in issue order
  int32_t group = -1;     // index into the recorder's group table
  uint64_t sequence = 0;  // 1-based number of the collective (or of the transfer, for p2p) on its group
  CommCall call;
  CommState state = CommState::queued;
  int64_t queued_us = 0, started_us = 0, completed_us = 0;  // wall clock (Unix epoch), 0 = not yet
  bool cross_node = false;                                  // its group spans nodes: the call's traffic left the node
};

// A group as registered: the analyser's notion of "who must take part".
struct FlightGroup {
  std::string name;
  std::string backend;         // "mpi" or "nccl": both may name a group "world"
  int instance = 0;            // groups of the same name, backend and ranks created before it on this rank
  std::vector<int> ranks;      // its members' world ranks, in group rank order
  uint64_t last_sequence = 0;  // the last collective recorded on it (p2p excluded); survives the ring
  bool spans_nodes = false;    // its members sit on more than one node (ProcessGroup::spans_nodes)
};

// A whole dump, as written and as read back.
struct FlightDump {
  int rank = 0, world_size = 1;
  std::string reason, host;
  int64_t pid = 0, time_us = 0, capacity = 0;
  std::vector<FlightGroup> groups;
  std::vector<FlightRecord> records;  // oldest first
};

std::string flight_dump_to_json(const FlightDump& dump);
// Throws titan::Error naming `source` (a path) and what is wrong.
FlightDump flight_dump_from_json(const std::string& text, const std::string& source);
// `<folder>/rank_<rank>.json`.
std::string flight_dump_path(const std::string& folder, int rank);

}  // namespace titan::comm
