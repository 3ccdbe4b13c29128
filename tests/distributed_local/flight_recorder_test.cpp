// The flight recorder: its ring, its dump format, the analyser behind
// `titan debug flight-recorder` on hand-made dumps, and two real jobs under
// mpirun (tests/distributed/fault_job): a rank that skips a collective, and
// SIGUSR1 to a running rank.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "titan/comm/flight_recorder.h"
#include "titan/comm/flight_recorder_analysis.h"
#include "titan/comm/process_group.h"

namespace titan::comm {
namespace flight_recorder_test {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return result;
  }
  char buffer[4096];
  size_t read = 0;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, read);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

// A fresh empty folder for one test.
fs::path fresh_folder(const std::string& name) {
  const fs::path folder = fs::temp_directory_path() / fmt::format("titan_flight_{}_{}", name, getpid());
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

CommCall all_reduce_call(int64_t numel) {
  CommCall call;
  call.op = CommOp::all_reduce;
  call.reduce_op = static_cast<int8_t>(ReduceOp::sum);
  call.dtype = DType::f32;
  call.numel_in = call.numel_out = numel;
  call.bytes_in = call.bytes_out = numel * 4;
  return call;
}

TEST(FlightRecorder, RingKeepsTheLastNInOrder) {
  FlightRecorder recorder;
  const int world = recorder.register_group("world", "mpi", {0});
  EXPECT_EQ(recorder.record(world, 1, all_reduce_call(4)), 0u) << "off until configured";
  recorder.configure(3, fresh_folder("ring").string());
  std::vector<uint64_t> handles;
  for (uint64_t sequence = 1; sequence <= 5; ++sequence) {
    handles.push_back(recorder.record(world, sequence, all_reduce_call(static_cast<int64_t>(sequence))));
  }
  recorder.start(handles[0]);  // overwritten since: ignored
  recorder.start(handles[3]);
  recorder.complete(handles[3]);
  recorder.start(handles[4]);
  const FlightDump dump = recorder.snapshot("test");
  ASSERT_EQ(dump.records.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(dump.records[i].sequence, i + 3);
    EXPECT_EQ(dump.records[i].call.numel_in, static_cast<int64_t>(i + 3));
    if (i > 0) {
      EXPECT_GT(dump.records[i].id, dump.records[i - 1].id);
    }
  }
  EXPECT_EQ(dump.records[0].state, CommState::queued);
  EXPECT_EQ(dump.records[1].state, CommState::completed);
  EXPECT_GT(dump.records[1].completed_us, 0);
  EXPECT_GE(dump.records[1].completed_us, dump.records[1].started_us);
  EXPECT_GE(dump.records[1].started_us, dump.records[1].queued_us);
  EXPECT_EQ(dump.records[2].state, CommState::started);
  EXPECT_EQ(dump.records[2].completed_us, 0);
  ASSERT_EQ(dump.groups.size(), 1u);
  EXPECT_EQ(dump.groups[0].last_sequence, 5u);

  // Fewer than N: all of them, oldest first; reconfiguring empties the ring.
  recorder.configure(8, recorder.folder());
  recorder.record(world, 6, all_reduce_call(6));
  recorder.record(world, 7, all_reduce_call(7));
  const FlightDump again = recorder.snapshot("test");
  ASSERT_EQ(again.records.size(), 2u);
  EXPECT_EQ(again.records[0].sequence, 6u);
  EXPECT_EQ(again.records[1].sequence, 7u);

  recorder.configure(0, recorder.folder());
  EXPECT_EQ(recorder.record(world, 8, all_reduce_call(8)), 0u);
  EXPECT_EQ(recorder.dump("off"), "");
}

TEST(FlightRecorder, DumpIsAtomicJsonThatReadsBack) {
  const fs::path folder = fresh_folder("dump") / "nested";
  FlightRecorder recorder;
  recorder.configure(4, folder.string());
  const int world = recorder.register_group("world", "mpi", {0});
  const int dp = recorder.register_group("dp \"quoted\"", "nccl", {0});
  const uint64_t first = recorder.record(world, 1, all_reduce_call(1024));
  recorder.start(first);
  recorder.complete(first);
  CommCall send;
  send.op = CommOp::send;
  send.dtype = DType::bf16;
  send.numel_in = send.numel_out = 8;
  send.bytes_in = send.bytes_out = 16;
  send.peer = 3;
  recorder.record(dp, 1, send);
  const std::string path = recorder.dump("a reason with \"quotes\"\nand a newline");
  ASSERT_EQ(path, flight_dump_path(folder.string(), 0));
  ASSERT_TRUE(fs::exists(path));
  for (const auto& entry : fs::directory_iterator(folder)) {
    EXPECT_EQ(entry.path().filename().string(), "rank_0.json") << "a temporary file was left behind";
  }
  const FlightDump read = flight_dump_from_json(read_text(path), path);
  EXPECT_EQ(read.rank, 0);
  EXPECT_EQ(read.world_size, 1);
  EXPECT_EQ(read.reason, "a reason with \"quotes\"\nand a newline");
  EXPECT_EQ(read.pid, static_cast<int64_t>(getpid()));
  EXPECT_FALSE(read.host.empty());
  EXPECT_EQ(read.capacity, 4);
  ASSERT_EQ(read.groups.size(), 2u);
  EXPECT_EQ(read.groups[1].name, "dp \"quoted\"");
  EXPECT_EQ(read.groups[1].backend, "nccl");
  EXPECT_EQ(read.groups[0].last_sequence, 1u);
  EXPECT_EQ(read.groups[1].last_sequence, 0u) << "point-to-point transfers are not the group's collectives";
  ASSERT_EQ(read.records.size(), 2u);
  const FlightDump original = recorder.snapshot("x");
  for (size_t i = 0; i < 2; ++i) {
    const FlightRecord& a = original.records[i];
    const FlightRecord& b = read.records[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.group, b.group);
    EXPECT_EQ(a.sequence, b.sequence);
    EXPECT_EQ(a.call.op, b.call.op);
    EXPECT_EQ(a.call.reduce_op, b.call.reduce_op);
    EXPECT_EQ(a.call.dtype, b.call.dtype);
    EXPECT_EQ(a.call.numel_in, b.call.numel_in);
    EXPECT_EQ(a.call.bytes_out, b.call.bytes_out);
    EXPECT_EQ(a.call.peer, b.call.peer);
    EXPECT_EQ(a.state, b.state);
    EXPECT_EQ(a.queued_us, b.queued_us);
    EXPECT_EQ(a.started_us, b.started_us);
    EXPECT_EQ(a.completed_us, b.completed_us);
  }
  // One record per line, names spelled out.
  EXPECT_TRUE(contains(read_text(path), "\"op\":\"all_reduce\"")) << read_text(path);
  EXPECT_TRUE(contains(read_text(path), "\"state\":\"completed\"")) << read_text(path);
}

// Hand-made dumps of a world of `world_size`: every rank has group 'world'.
struct DumpBuilder {
  FlightDump dump;
  DumpBuilder(int rank, int world_size) {
    dump.rank = rank;
    dump.world_size = world_size;
    dump.reason = "test";
    dump.host = "host";
    dump.capacity = 16;
    std::vector<int> everyone;
    for (int r = 0; r < world_size; ++r) everyone.push_back(r);
    dump.groups.push_back(FlightGroup{"world", "mpi", 0, everyone, 0, false});
  }
  // Collectives #first..#last on group 0, completed unless `last_state` says otherwise for the last.
  DumpBuilder& collectives(uint64_t first, uint64_t last, CommState last_state = CommState::completed,
                           CommCall call = all_reduce_call(1024)) {
    for (uint64_t sequence = first; sequence <= last; ++sequence) {
      FlightRecord record;
      record.id = dump.records.size() + 1;
      record.group = 0;
      record.sequence = sequence;
      record.call = call;
      record.state = sequence == last ? last_state : CommState::completed;
      record.queued_us = 1;
      dump.records.push_back(record);
    }
    dump.groups[0].last_sequence = std::max(dump.groups[0].last_sequence, last);
    return *this;
  }
};

// Writes the dumps into a fresh folder and runs the CLI on it.
CommandResult run_debug(const std::string& name, const std::vector<FlightDump>& dumps) {
  const fs::path folder = fresh_folder(name);
  for (const FlightDump& dump : dumps) {
    std::ofstream(flight_dump_path(folder.string(), dump.rank)) << flight_dump_to_json(dump);
  }
  return run_command(fmt::format("{} debug flight-recorder {}", TITAN_CLI_PATH, folder.string()));
}

TEST(FlightRecorderAnalysis, AllRanksAgreeAndCompleted) {
  const std::vector<FlightDump> dumps = {DumpBuilder(0, 2).collectives(1, 6).dump,
                                         DumpBuilder(1, 2).collectives(3, 6).dump};  // ring reaches back less far
  const FlightAnalysis analysis = analyse_flight_dumps(dumps);
  EXPECT_EQ(analysis.exit_code, 0) << analysis.report;
  EXPECT_TRUE(contains(analysis.report, "all 2 ranks agree")) << analysis.report;
  const CommandResult cli = run_debug("fine", dumps);
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
}

TEST(FlightRecorderAnalysis, NamesTheRankBehind) {
  const std::vector<FlightDump> dumps = {DumpBuilder(0, 3).collectives(1, 5, CommState::started).dump,
                                         DumpBuilder(1, 3).collectives(1, 5, CommState::started).dump,
                                         DumpBuilder(2, 3).collectives(1, 4).dump};
  const FlightAnalysis analysis = analyse_flight_dumps(dumps);
  EXPECT_EQ(analysis.exit_code, 1);
  EXPECT_TRUE(contains(analysis.report,
                       "group 'world' collective #5 (all_reduce(sum), 4096 bytes f32): ranks 0,1 started it; rank 2 "
                       "never reached it (its last on 'world' is #4 all_reduce(sum), 4096 bytes f32, completed)"))
      << analysis.report;
  const CommandResult cli = run_debug("behind", dumps);
  EXPECT_EQ(cli.exit_code, 1) << cli.output;
  EXPECT_TRUE(contains(cli.output, "rank 2 never reached it")) << cli.output;
}

TEST(FlightRecorderAnalysis, NamesADisagreement) {
  CommCall broadcast = all_reduce_call(1024);
  broadcast.op = CommOp::broadcast;
  broadcast.reduce_op = -1;
  broadcast.peer = 0;
  const std::vector<FlightDump> dumps = {
      DumpBuilder(0, 2).collectives(1, 3).collectives(4, 4).dump,
      DumpBuilder(1, 2).collectives(1, 3).collectives(4, 4, CommState::completed, broadcast).dump};
  const FlightAnalysis analysis = analyse_flight_dumps(dumps);
  EXPECT_EQ(analysis.exit_code, 1);
  EXPECT_TRUE(contains(analysis.report,
                       "group 'world' collective #4: ranks disagree on what it is: rank 0 issued all_reduce(sum), 4096 "
                       "bytes f32; rank 1 issued broadcast from 0, 4096 bytes f32"))
      << analysis.report;
  // Sizes count too.
  const std::vector<FlightDump> sizes = {
      DumpBuilder(0, 2).collectives(1, 2).dump,
      DumpBuilder(1, 2).collectives(1, 1).collectives(2, 2, CommState::completed, all_reduce_call(512)).dump};
  const FlightAnalysis size_analysis = analyse_flight_dumps(sizes);
  EXPECT_EQ(size_analysis.exit_code, 1);
  EXPECT_TRUE(contains(size_analysis.report, "collective #2: ranks disagree")) << size_analysis.report;
}

TEST(FlightRecorderAnalysis, NamesAMissingRankAndBadInput) {
  const std::vector<FlightDump> dumps = {DumpBuilder(0, 3).collectives(1, 4).dump,
                                         DumpBuilder(2, 3).collectives(1, 4).dump};
  const CommandResult cli = run_debug("missing", dumps);
  EXPECT_EQ(cli.exit_code, 1) << cli.output;
  EXPECT_TRUE(contains(cli.output, "dumps of 2 of 3 ranks")) << cli.output;
  EXPECT_TRUE(contains(cli.output, "rank 1 left no dump")) << cli.output;

  // Bad input: exit 2, naming the file.
  const fs::path folder = fresh_folder("bad");
  std::ofstream(folder / "rank_0.json") << flight_dump_to_json(DumpBuilder(0, 2).collectives(1, 2).dump);
  std::ofstream(folder / "rank_1.json") << "{\"version\": 1, \"rank\": 1, \"world_size\": 2,";
  const CommandResult bad = run_command(fmt::format("{} debug flight-recorder {}", TITAN_CLI_PATH, folder.string()));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, (folder / "rank_1.json").string())) << bad.output;
  const CommandResult empty =
      run_command(fmt::format("{} debug flight-recorder {}", TITAN_CLI_PATH, fresh_folder("empty").string()));
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_TRUE(contains(empty.output, "no rank_<N>.json")) << empty.output;
}

// Under the sanitizers leak checks stay off, as for every mpirun test: Open MPI
// leaves its own allocations at exit, which would turn a clean exit into 1.
std::string fault_job(int ranks, const std::string& arguments) {
  return fmt::format(
      "OMPI_MCA_mpi_yield_when_idle=1 ASAN_OPTIONS=detect_leaks=0 timeout -k 5 90 {} --allow-run-as-root "
      "--oversubscribe -np {} {} {}",
      TITAN_MPIEXEC, ranks, TITAN_FAULT_JOB, arguments);
}

// Rank 2 skips the 5th all_reduce on 'world': ranks 0 and 1 time out in it,
// every rank leaves a dump (the two that timed out, and rank 2 when the stall
// census asks it), and the analyser names rank 2 and collective #5.
TEST(FlightRecorderJob, NamesTheRankThatSkippedACollective) {
  const fs::path folder = fresh_folder("hang");
  const CommandResult job = run_command(fault_job(3, fmt::format("hang 2 2 {}", folder.string())));
  EXPECT_EQ(job.exit_code, 3) << job.output;  // the timeout's MPI_Abort
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(fs::exists(flight_dump_path(folder.string(), rank))) << "rank " << rank << "\n" << job.output;
  }
  const CommandResult debug = run_command(fmt::format("{} debug flight-recorder {}", TITAN_CLI_PATH, folder.string()));
  EXPECT_EQ(debug.exit_code, 1) << debug.output;
  EXPECT_TRUE(contains(debug.output, "dumps of 3 of 3 ranks")) << debug.output;
  EXPECT_TRUE(contains(debug.output,
                       "group 'world' collective #5 (all_reduce(sum), 16 bytes f32): ranks 0,1 started "
                       "it; rank 2 never reached it (its last on 'world' is #4 all_reduce(sum), 16 "
                       "bytes f32, completed)"))
      << debug.output;
}

// SIGUSR1 writes the rank's dump and the job runs on to a clean end.
TEST(FlightRecorderJob, Sigusr1DumpsAndKeepsRunning) {
  const fs::path folder = fresh_folder("sigusr1");
  const CommandResult job = run_command(fault_job(2, fmt::format("sigusr1 1 30 {}", folder.string())));
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_TRUE(contains(job.output, "fault_job: rank 1: dump written")) << job.output;
  EXPECT_TRUE(contains(job.output, "fault_job: rank 1: finished")) << job.output;
  EXPECT_TRUE(contains(job.output, "fault_job: rank 0: finished")) << job.output;
  EXPECT_FALSE(fs::exists(flight_dump_path(folder.string(), 0))) << "only the signalled rank dumps";
  const std::string path = flight_dump_path(folder.string(), 1);
  ASSERT_TRUE(fs::exists(path)) << job.output;
  const FlightDump dump = flight_dump_from_json(read_text(path), path);
  EXPECT_EQ(dump.reason, "SIGUSR1");
  EXPECT_EQ(dump.rank, 1);
  EXPECT_EQ(dump.world_size, 2);
  ASSERT_EQ(dump.records.size(), 3u);
  for (const FlightRecord& record : dump.records) EXPECT_EQ(record.state, CommState::completed);
  EXPECT_EQ(dump.records.back().sequence, 3u);
}

}  // namespace flight_recorder_test
}  // namespace titan::comm
