#include "titan/comm/flight_dump.h"

#include <filesystem>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "titan/core/error.h"

namespace titan::comm {
namespace {

using nlohmann::json;

constexpr int kFormatVersion = 1;
constexpr CommOp kOps[] = {CommOp::all_reduce, CommOp::all_gather, CommOp::reduce_scatter,
                           CommOp::broadcast,  CommOp::all_to_all, CommOp::send,
                           CommOp::recv,       CommOp::barrier,    CommOp::split};
constexpr CommState kStates[] = {CommState::queued, CommState::started, CommState::completed};
// Indexed by ReduceOp.
constexpr const char* kReduceOpNames[] = {"sum", "avg", "max"};

json record_to_json(const FlightRecord& record, const std::vector<FlightGroup>& groups) {
  const bool known = record.group >= 0 && static_cast<size_t>(record.group) < groups.size();
  json out = {
      {"id", record.id},
      {"group_id", record.group},
      {"group", known ? groups[record.group].name : std::string("?")},
      {"group_size", known ? groups[record.group].ranks.size() : 0},
      {"seq", record.sequence},
      {"op", comm_op_name(record.call.op)},
      {"reduce_op", record.call.reduce_op < 0 ? json(nullptr) : json(comm_reduce_op_name(record.call.reduce_op))},
      {"dtype", dtype_name(record.call.dtype)},
      {"numel_in", record.call.numel_in},
      {"numel_out", record.call.numel_out},
      {"bytes_in", record.call.bytes_in},
      {"bytes_out", record.call.bytes_out},
      {"peer", record.call.peer},
      {"state", comm_state_name(record.state)},
      {"time_queued_us", record.queued_us},
      {"time_started_us", record.started_us},
      {"time_completed_us", record.completed_us},
      {"cross_node", record.cross_node},
  };
  return out;
}

// The reader takes each field's JSON type as written and nothing else:
// nlohmann's get<T>() would turn a float into an int (undefined behaviour when
// it does not fit), a boolean into a number, or wrap an integer too big for T.

// A value for an error message: numbers and strings as written, containers by their type.
std::string shown(const json& value) { return value.is_structured() ? value.type_name() : value.dump(); }

const json& member(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  TITAN_CHECK(it != object.end(), "{}: missing \"{}\"", where, key);
  return *it;
}

// `value` as a T, when it is a JSON integer that T holds.
template <typename T>
T integer(const json& value, const std::string& what) {
  if (value.is_number_unsigned()) {
    const auto number = value.get<uint64_t>();
    TITAN_CHECK(std::in_range<T>(number), "{}: {} is out of range", what, number);
    return static_cast<T>(number);
  }
  if (value.is_number_integer()) {
    const auto number = value.get<int64_t>();
    TITAN_CHECK(std::in_range<T>(number), "{}: {} is out of range", what, number);
    return static_cast<T>(number);
  }
  fail("{}: an integer expected, got {}", what, shown(value));
}

template <typename T>
T integer_field(const json& object, const char* key, const std::string& where) {
  return integer<T>(member(object, key, where), fmt::format("{}: \"{}\"", where, key));
}

std::string string_field(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  TITAN_CHECK(value.is_string(), "{}: \"{}\": a string expected, got {}", where, key, shown(value));
  return value.get<std::string>();
}

// A boolean that dumps written before nodes were tracked lack (then false).
bool optional_flag(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) return false;
  TITAN_CHECK(it->is_boolean(), "{}: \"{}\": true or false expected, got {}", where, key, shown(*it));
  return it->get<bool>();
}

const json& array_field(const json& object, const char* key, const std::string& where) {
  const json& value = member(object, key, where);
  TITAN_CHECK(value.is_array(), "{}: \"{}\" must be an array, got {}", where, key, value.type_name());
  return value;
}

}  // namespace

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce:
      return "all_reduce";
    case CommOp::all_gather:
      return "all_gather";
    case CommOp::reduce_scatter:
      return "reduce_scatter";
    case CommOp::broadcast:
      return "broadcast";
    case CommOp::all_to_all:
      return "all_to_all";
    case CommOp::send:
      return "send";
    case CommOp::recv:
      return "recv";
    case CommOp::barrier:
      return "barrier";
    case CommOp::split:
      return "split";
  }
  return "?";
}

CommOp parse_comm_op(const std::string& name) {
  for (CommOp op : kOps) {
    if (name == comm_op_name(op)) return op;
  }
  fail("unknown collective '{}'", name);
}

const char* comm_state_name(CommState state) {
  switch (state) {
    case CommState::queued:
      return "queued";
    case CommState::started:
      return "started";
    case CommState::completed:
      return "completed";
  }
  return "?";
}

CommState parse_comm_state(const std::string& name) {
  for (CommState state : kStates) {
    if (name == comm_state_name(state)) return state;
  }
  fail("unknown collective state '{}' (expected queued, started or completed)", name);
}

const char* comm_reduce_op_name(int reduce_op) {
  constexpr int count = static_cast<int>(std::size(kReduceOpNames));
  return reduce_op >= 0 && reduce_op < count ? kReduceOpNames[reduce_op] : "?";
}

std::string flight_dump_path(const std::string& folder, int rank) {
  return (std::filesystem::path(folder) / fmt::format("rank_{}.json", rank)).string();
}

std::string flight_dump_to_json(const FlightDump& dump) {
  json groups = json::array();
  for (size_t i = 0; i < dump.groups.size(); ++i) {
    const FlightGroup& group = dump.groups[i];
    groups.push_back({{"id", i},
                      {"name", group.name},
                      {"backend", group.backend},
                      {"instance", group.instance},
                      {"ranks", group.ranks},
                      {"last_seq", group.last_sequence},
                      {"spans_nodes", group.spans_nodes}});
  }
  const json header = {{"version", kFormatVersion}, {"rank", dump.rank},         {"world_size", dump.world_size},
                       {"reason", dump.reason},     {"host", dump.host},         {"pid", dump.pid},
                       {"time_us", dump.time_us},   {"capacity", dump.capacity}, {"groups", groups}};
  // One record per line: readable and greppable, and still one JSON document.
  std::string text = header.dump();
  text.pop_back();  // the closing brace
  text += ",\"records\":[";
  for (size_t i = 0; i < dump.records.size(); ++i) {
    text += i == 0 ? "\n" : ",\n";
    text += record_to_json(dump.records[i], dump.groups).dump();
  }
  text += "\n]}\n";
  return text;
}

FlightDump flight_dump_from_json(const std::string& text, const std::string& source) {
  json in;
  try {
    in = json::parse(text);
  } catch (const json::exception& error) {
    fail("{}: not a flight recorder dump (invalid JSON: {})", source, error.what());
  }
  TITAN_CHECK(in.is_object(), "{}: not a flight recorder dump (expected a JSON object)", source);
  const int version = integer_field<int>(in, "version", source);
  TITAN_CHECK(version == kFormatVersion, "{}: flight recorder format version {}, this titan reads {}", source, version,
              kFormatVersion);
  FlightDump dump;
  dump.rank = integer_field<int>(in, "rank", source);
  dump.world_size = integer_field<int>(in, "world_size", source);
  TITAN_CHECK(dump.world_size > 0 && dump.rank >= 0 && dump.rank < dump.world_size, "{}: rank {} outside a world of {}",
              source, dump.rank, dump.world_size);
  dump.reason = string_field(in, "reason", source);
  dump.host = string_field(in, "host", source);
  dump.pid = integer_field<int64_t>(in, "pid", source);
  dump.time_us = integer_field<int64_t>(in, "time_us", source);
  dump.capacity = integer_field<int64_t>(in, "capacity", source);
  const json& groups = array_field(in, "groups", source);
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string where = fmt::format("{}: groups[{}]", source, i);
    TITAN_CHECK(groups[i].is_object(), "{}: a JSON object expected, got {}", where, groups[i].type_name());
    FlightGroup group;
    group.name = string_field(groups[i], "name", where);
    group.backend = string_field(groups[i], "backend", where);
    group.instance = integer_field<int>(groups[i], "instance", where);
    const json& ranks = array_field(groups[i], "ranks", where);
    for (size_t r = 0; r < ranks.size(); ++r) {
      group.ranks.push_back(integer<int>(ranks[r], fmt::format("{}: \"ranks\"[{}]", where, r)));
    }
    group.last_sequence = integer_field<uint64_t>(groups[i], "last_seq", where);
    group.spans_nodes = optional_flag(groups[i], "spans_nodes", where);
    for (int rank : group.ranks) {
      TITAN_CHECK(rank >= 0 && rank < dump.world_size, "{}: rank {} outside a world of {}", where, rank,
                  dump.world_size);
    }
    dump.groups.push_back(std::move(group));
  }
  const json& records = array_field(in, "records", source);
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string where = fmt::format("{}: records[{}]", source, i);
    const json& in_record = records[i];
    TITAN_CHECK(in_record.is_object(), "{}: a JSON object expected, got {}", where, in_record.type_name());
    FlightRecord record;
    record.id = integer_field<uint64_t>(in_record, "id", where);
    record.group = integer_field<int32_t>(in_record, "group_id", where);
    TITAN_CHECK(record.group >= 0 && static_cast<size_t>(record.group) < dump.groups.size(),
                "{}: group_id {} is not one of the {} groups", where, record.group, dump.groups.size());
    record.sequence = integer_field<uint64_t>(in_record, "seq", where);
    TITAN_CHECK(record.sequence > 0, "{}: \"seq\" 0 (numbers start at 1)", where);
    const std::string op = string_field(in_record, "op", where);
    const std::string state = string_field(in_record, "state", where);
    const std::string dtype = string_field(in_record, "dtype", where);
    try {
      record.call.op = parse_comm_op(op);
      record.state = parse_comm_state(state);
      record.call.dtype = parse_dtype(dtype);
    } catch (const Error& error) {
      fail("{}: {}", where, error.what());
    }
    if (!member(in_record, "reduce_op", where).is_null()) {
      const std::string name = string_field(in_record, "reduce_op", where);
      for (size_t op = 0; op < std::size(kReduceOpNames); ++op) {
        if (name == kReduceOpNames[op]) record.call.reduce_op = static_cast<int8_t>(op);
      }
      TITAN_CHECK(record.call.reduce_op >= 0, "{}: unknown reduce_op '{}'", where, name);
    }
    record.call.numel_in = integer_field<int64_t>(in_record, "numel_in", where);
    record.call.numel_out = integer_field<int64_t>(in_record, "numel_out", where);
    record.call.bytes_in = integer_field<int64_t>(in_record, "bytes_in", where);
    record.call.bytes_out = integer_field<int64_t>(in_record, "bytes_out", where);
    record.call.peer = integer_field<int32_t>(in_record, "peer", where);
    record.queued_us = integer_field<int64_t>(in_record, "time_queued_us", where);
    record.started_us = integer_field<int64_t>(in_record, "time_started_us", where);
    record.completed_us = integer_field<int64_t>(in_record, "time_completed_us", where);
    record.cross_node = optional_flag(in_record, "cross_node", where);
    dump.records.push_back(record);
  }
  return dump;
}

}  // namespace titan::comm
