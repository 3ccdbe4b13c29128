#include "titan/comm/flight_recorder_analysis.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "titan/core/error.h"

namespace titan::comm {
namespace {

namespace fs = std::filesystem;

// "rank 2" or "ranks 0,1".
std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

// The ranks of [0, world_size) not in `dumped`, as "rank 3" or "ranks 1,2,5-1023": by runs, since
// the world a dump names may be far bigger than the dumps at hand. "" when there are none.
std::string missing_ranks_text(const std::set<int>& dumped, int world_size) {
  std::vector<std::string> runs;
  int64_t missing = 0;
  const auto add_run = [&](int64_t first, int64_t last) {
    if (first > last) return;
    missing += last - first + 1;
    if (first == last) {
      runs.push_back(fmt::format("{}", first));
    } else if (last == first + 1) {
      runs.push_back(fmt::format("{},{}", first, last));
    } else {
      runs.push_back(fmt::format("{}-{}", first, last));
    }
  };
  int64_t next = 0;
  for (int rank : dumped) {
    add_run(next, std::min<int64_t>(rank, world_size) - 1);
    next = std::max<int64_t>(next, int64_t{rank} + 1);
  }
  add_run(next, int64_t{world_size} - 1);
  if (missing == 0) return "";
  return fmt::format("{} {}", missing == 1 ? "rank" : "ranks", fmt::join(runs, ","));
}

// What must match across ranks for one collective: all_to_all's sizes are
// each rank's own, and a split's color differs by design.
auto signature(const CommCall& call) {
  const bool sized = call.op != CommOp::all_to_all && call.op != CommOp::split && call.op != CommOp::barrier;
  return std::make_tuple(call.op, call.reduce_op, sized ? call.dtype : DType::u8, sized ? call.bytes_in : 0,
                         sized ? call.bytes_out : 0, call.op == CommOp::broadcast ? call.peer : -1);
}

std::string describe(const CommCall& call) {
  std::string text = comm_op_name(call.op);
  if (call.reduce_op >= 0) text += fmt::format("({})", comm_reduce_op_name(call.reduce_op));
  if (call.op == CommOp::broadcast) text += fmt::format(" from {}", call.peer);
  if (is_point_to_point(call.op)) text += fmt::format(" {} {}", call.op == CommOp::send ? "to" : "from", call.peer);
  switch (call.op) {
    case CommOp::barrier:
    case CommOp::split:
      return text;
    case CommOp::all_to_all:
      return fmt::format("{}, {}", text, dtype_name(call.dtype));
    default:
      break;
  }
  if (call.bytes_in == call.bytes_out)
    return fmt::format("{}, {} bytes {}", text, call.bytes_in, dtype_name(call.dtype));
  return fmt::format("{}, {} -> {} bytes {}", text, call.bytes_in, call.bytes_out, dtype_name(call.dtype));
}

// One process group as every rank saw it. Groups are told apart by name,
// backend, members and creation order: "dp" names a different group of ranks
// in each data-parallel replica.
using GroupKey = std::tuple<std::string, std::string, std::vector<int>, int>;

struct MemberView {
  uint64_t last_sequence = 0;
  std::map<uint64_t, FlightRecord> collectives;  // by sequence number, as far as its ring reaches
};

struct GroupView {
  const FlightGroup* group = nullptr;  // as registered (the first rank's copy)
  std::map<int, MemberView> members;   // by world rank: members whose dump has this group
};

std::string group_label(const FlightGroup& group, int world_size) {
  std::string label = fmt::format("group '{}'", group.name);
  if (group.backend != "mpi") label += fmt::format(" ({})", group.backend);
  bool everyone = group.ranks.size() == static_cast<size_t>(world_size);
  for (size_t r = 0; everyone && r < group.ranks.size(); ++r) everyone = group.ranks[r] == static_cast<int>(r);
  if (!everyone) label += fmt::format(" [world ranks {}]", fmt::join(group.ranks, ","));
  // A group made again with the same name and ranks (its numbering restarted).
  if (group.instance > 0) label += fmt::format(" (instance {})", group.instance + 1);
  // Its traffic leaves the node: a stall here may be the network's.
  if (group.spans_nodes) label += " (spans nodes)";
  return label;
}

// Why `rank` never reached collective #`sequence`: its last one, as far as known.
std::string behind_reason(const FlightGroup& group, const MemberView* member) {
  if (member == nullptr) return fmt::format("never created '{}'", group.name);
  if (member->last_sequence == 0) return fmt::format("issued nothing on '{}'", group.name);
  const auto last = member->collectives.find(member->last_sequence);
  if (last == member->collectives.end()) {
    return fmt::format("its last on '{}' is #{}, no longer in its ring", group.name, member->last_sequence);
  }
  return fmt::format("its last on '{}' is #{} {}, {}", group.name, member->last_sequence, describe(last->second.call),
                     comm_state_name(last->second.state));
}

// The first collective of `view` that is not fine on every member that left a
// dump, as one line; nullopt when all agree and completed.
std::optional<std::string> first_culprit(const GroupView& view, const std::set<int>& dumped, int world_size) {
  const FlightGroup& group = *view.group;
  std::vector<int> present;
  for (int rank : group.ranks) {
    if (dumped.count(rank) != 0) present.push_back(rank);
  }
  const auto member_of = [&](int rank) -> const MemberView* {
    const auto it = view.members.find(rank);
    return it == view.members.end() ? nullptr : &it->second;
  };
  const auto last_of = [&](int rank) {
    const MemberView* member = member_of(rank);
    return member == nullptr ? uint64_t{0} : member->last_sequence;
  };
  // Candidates: every recorded sequence number, and the first one some member never reached.
  std::set<uint64_t> candidates;
  uint64_t lowest_last = UINT64_MAX, highest_last = 0;
  for (int rank : present) {
    lowest_last = std::min(lowest_last, last_of(rank));
    highest_last = std::max(highest_last, last_of(rank));
    if (const MemberView* member = member_of(rank)) {
      for (const auto& [sequence, record] : member->collectives) candidates.insert(sequence);
    }
  }
  if (lowest_last < highest_last) candidates.insert(lowest_last + 1);

  for (uint64_t sequence : candidates) {
    std::vector<int> behind;
    std::map<CommState, std::vector<int>> by_state;
    std::vector<int> unrecorded;  // reached it, but their ring no longer holds it
    std::map<decltype(signature(CommCall{})), std::vector<int>> by_signature;
    std::map<decltype(signature(CommCall{})), CommCall> calls;
    for (int rank : present) {
      const MemberView* member = member_of(rank);
      // A member without the group counts as behind even for a #0 no real recorder writes.
      if (member == nullptr || member->last_sequence < sequence) {
        behind.push_back(rank);
        continue;
      }
      const auto record = member->collectives.find(sequence);
      if (record == member->collectives.end()) {
        unrecorded.push_back(rank);
        continue;
      }
      by_state[record->second.state].push_back(rank);
      by_signature[signature(record->second.call)].push_back(rank);
      calls.emplace(signature(record->second.call), record->second.call);
    }
    const bool incomplete =
        by_state.size() > 1 || (by_state.size() == 1 && by_state.begin()->first != CommState::completed);
    if (behind.empty() && by_signature.size() <= 1 && !incomplete) continue;

    std::vector<std::string> parts;
    std::string what;
    if (by_signature.size() == 1) {
      what = fmt::format(" ({})", describe(calls.begin()->second));
    } else if (by_signature.size() > 1) {
      std::vector<std::string> sides;
      sides.reserve(by_signature.size());
      for (const auto& [key, ranks] : by_signature) {
        sides.push_back(fmt::format("{} issued {}", ranks_text(ranks), describe(calls.at(key))));
      }
      parts.push_back(fmt::format("ranks disagree on what it is: {}", fmt::join(sides, "; ")));
    }
    for (CommState state : {CommState::completed, CommState::started, CommState::queued}) {
      const auto ranks = by_state.find(state);
      if (ranks == by_state.end()) continue;
      parts.push_back(fmt::format("{} {} it", ranks_text(ranks->second),
                                  state == CommState::queued ? "queued (never started)" : comm_state_name(state)));
    }
    if (!unrecorded.empty()) {
      parts.push_back(fmt::format("{} reached it (no longer in their ring)", ranks_text(unrecorded)));
    }
    for (int rank : behind) {
      parts.push_back(fmt::format("rank {} never reached it ({})", rank, behind_reason(group, member_of(rank))));
    }
    return fmt::format("{} collective #{}{}: {}", group_label(group, world_size), sequence, what,
                       fmt::join(parts, "; "));
  }
  return std::nullopt;
}

}  // namespace

std::vector<FlightDump> read_flight_dumps(const std::string& folder) {
  std::error_code error;
  TITAN_CHECK(fs::is_directory(folder, error), "flight recorder dumps: '{}' is not a folder", folder);
  const std::regex name("rank_([0-9]+)\\.json");
  std::map<int, std::pair<FlightDump, std::string>> by_rank;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    std::smatch match;
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || !std::regex_match(file, match, name)) continue;
    const std::string path = entry.path().string();
    std::ifstream in(path, std::ios::binary);
    TITAN_CHECK(in.good(), "{}: cannot open it", path);
    std::ostringstream text;
    text << in.rdbuf();
    FlightDump dump = flight_dump_from_json(text.str(), path);
    TITAN_CHECK(std::to_string(dump.rank) == match[1].str(), "{}: holds the dump of rank {} (renamed?)", path,
                dump.rank);
    const int rank = dump.rank;  // read before the dump is moved into the map
    by_rank.emplace(rank, std::make_pair(std::move(dump), path));
  }
  TITAN_CHECK(!by_rank.empty(), "flight recorder dumps: no rank_<N>.json in '{}'", folder);
  std::vector<FlightDump> dumps;
  const auto& [first, first_path] = by_rank.begin()->second;
  for (auto& [rank, entry] : by_rank) {
    TITAN_CHECK(entry.first.world_size == first.world_size, "{}: a world of {} ranks, but {} says {}", entry.second,
                entry.first.world_size, first_path, first.world_size);
    dumps.push_back(std::move(entry.first));
  }
  return dumps;
}

FlightAnalysis analyse_flight_dumps(const std::vector<FlightDump>& dumps) {
  TITAN_CHECK(!dumps.empty(), "flight recorder: no dumps to analyse");
  const int world_size = dumps.front().world_size;
  for (size_t i = 0; i < dumps.size(); ++i) {
    // What read_flight_dumps makes sure of; the analysis indexes by it.
    TITAN_CHECK(dumps[i].world_size == world_size, "flight recorder: rank {} says a world of {} ranks, rank {} says {}",
                dumps[i].rank, dumps[i].world_size, dumps.front().rank, world_size);
    TITAN_CHECK(dumps[i].rank >= 0 && dumps[i].rank < world_size, "flight recorder: rank {} outside a world of {}",
                dumps[i].rank, world_size);
    TITAN_CHECK(i == 0 || dumps[i - 1].rank < dumps[i].rank,
                "flight recorder: dumps out of rank order, or two of rank {}", dumps[i].rank);
  }
  FlightAnalysis analysis;
  std::string& out = analysis.report;

  std::set<int> dumped;
  for (const FlightDump& dump : dumps) dumped.insert(dump.rank);
  out += fmt::format("flight recorder: dumps of {} of {} ranks\n", dumps.size(), world_size);
  for (const FlightDump& dump : dumps) {
    const auto crossed = std::count_if(dump.records.begin(), dump.records.end(),
                                       [](const FlightRecord& record) { return record.cross_node; });
    out +=
        fmt::format("  rank {} ({}, pid {}): {} records{}; {}\n", dump.rank, dump.host, dump.pid, dump.records.size(),
                    crossed > 0 ? fmt::format(" ({} crossed nodes)", crossed) : "", dump.reason);
  }
  const std::string missing = missing_ranks_text(dumped, world_size);
  if (!missing.empty()) {
    out += fmt::format("{} left no dump (dead, killed before writing it, or flight recorder off)\n", missing);
    analysis.exit_code = 1;
  }

  // Line every rank's groups and records up.
  std::map<GroupKey, GroupView> views;
  std::vector<std::string> unfinished_transfers;
  for (const FlightDump& dump : dumps) {
    std::vector<GroupView*> by_index;
    for (const FlightGroup& group : dump.groups) {
      GroupView& view = views[GroupKey{group.name, group.backend, group.ranks, group.instance}];
      if (view.group == nullptr) view.group = &group;
      view.members[dump.rank].last_sequence = group.last_sequence;
      by_index.push_back(&view);
    }
    for (const FlightRecord& record : dump.records) {
      const FlightGroup& group = dump.groups[static_cast<size_t>(record.group)];
      if (is_point_to_point(record.call.op)) {
        if (record.state != CommState::completed) {
          unfinished_transfers.push_back(fmt::format("rank {}: {} on {} (transfer #{}) {}", dump.rank,
                                                     describe(record.call), group_label(group, world_size),
                                                     record.sequence, comm_state_name(record.state)));
        }
        continue;
      }
      by_index[static_cast<size_t>(record.group)]->members[dump.rank].collectives[record.sequence] = record;
    }
  }

  int clean = 0;
  for (const auto& [key, view] : views) {
    if (std::optional<std::string> culprit = first_culprit(view, dumped, world_size)) {
      out += *culprit + "\n";
      analysis.exit_code = 1;
    } else {
      ++clean;
    }
  }
  for (const std::string& line : unfinished_transfers) out += fmt::format("unfinished transfer: {}\n", line);
  if (!unfinished_transfers.empty()) analysis.exit_code = 1;
  if (analysis.exit_code == 0) {
    out += fmt::format("all {} ranks agree on all {} groups, and every recorded collective completed\n", world_size,
                       views.size());
  } else if (clean > 0) {
    out += fmt::format("({} other groups: the ranks agree and every recorded collective completed)\n", clean);
  }
  return analysis;
}

}  // namespace titan::comm
