// A tiny distributed job that fails on purpose, for the fault tests in
// tests/distributed_local/fault_test.cpp (run under mpirun):
//   titan_fault_job kill  RANK          RANK dies (SIGKILL) after the first all_reduce
//   titan_fault_job stall RANK TIMEOUT  RANK sleeps instead of joining the second all_reduce
//   titan_fault_job error RANK          RANK throws titan::Error between two all_reduces
//   titan_fault_job hang  RANK TIMEOUT DIR   RANK skips the 5th all_reduce and sleeps
//   titan_fault_job sigusr1 RANK TIMEOUT DIR RANK sends itself SIGUSR1 after 3 all_reduces;
//                                            all do 3 more and exit 0
// Every other rank keeps issuing all_reduces; the tests check how the job ends.
// With DIR, the flight recorder is on and dumps there (flight_recorder_test.cpp).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "titan/comm/flight_recorder.h"
#include "titan/comm/world.h"
#include "titan/train/preemption.h"

namespace {

using titan::comm::ReduceOp;
using titan::comm::World;

void all_reduce_once(World& world, int step) {
  const titan::Tensor tensor = titan::Tensor::full({4}, 1.0);
  world.group()->all_reduce(tensor, ReduceOp::sum)->wait();
  std::printf("fault_job: rank %d: all_reduce %d done\n", world.rank(), step);
  std::fflush(stdout);
}

int run(const std::string& mode, int faulty, double timeout_seconds) {
  World& world = World::instance(timeout_seconds);
  if (mode == "hang") {
    for (int step = 1; step <= 4; ++step) all_reduce_once(world, step);
    if (world.rank() == faulty) {
      std::this_thread::sleep_for(std::chrono::seconds(300));
      return 0;
    }
    for (int step = 5; step < 1000; ++step) all_reduce_once(world, step);
    return 0;
  }
  if (mode == "sigusr1") {
    for (int step = 1; step <= 3; ++step) all_reduce_once(world, step);
    if (world.rank() == faulty) {
      // A real process-wide signal: the signal thread takes it (it is blocked everywhere else).
      kill(getpid(), SIGUSR1);
      const std::string path =
          titan::comm::flight_dump_path(titan::comm::FlightRecorder::instance().folder(), world.rank());
      for (int i = 0; i < 1000 && !std::filesystem::exists(path); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::printf("fault_job: rank %d: dump %s\n", world.rank(), std::filesystem::exists(path) ? "written" : "missing");
    }
    for (int step = 4; step <= 6; ++step) all_reduce_once(world, step);
    std::printf("fault_job: rank %d: finished\n", world.rank());
    std::fflush(stdout);
    return 0;
  }
  all_reduce_once(world, 1);
  if (world.rank() == faulty) {
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "stall") std::this_thread::sleep_for(std::chrono::seconds(300));
    if (mode == "error") titan::fail("fault_job: rank {} hit a bad input", world.rank());
  }
  for (int step = 2; step < 1000; ++step) all_reduce_once(world, step);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As the titan CLI does, before any thread exists: SIGUSR1 goes to the signal thread.
  titan::train::install_signal_thread();
  if (argc < 3) {
    std::fprintf(stderr, "usage: titan_fault_job kill|stall|error|hang|sigusr1 RANK [TIMEOUT_SECONDS [TRACE_DIR]]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int faulty = std::atoi(argv[2]);
  const double timeout_seconds = argc > 3 ? std::atof(argv[3]) : 60.0;
  if (argc > 4) titan::comm::FlightRecorder::instance().configure(64, argv[4]);
  try {
    return run(mode, faulty, timeout_seconds);
  } catch (const titan::Error& error) {
    // What the CLI should do in a launched job: peers blocked in a collective
    // with this rank would otherwise wait out the whole timeout.
    std::fprintf(stderr, "titan: error on rank %d: %s\n", World::instance().rank(), error.what());
    if (World::instance().size() > 1) titan::comm::abort_job(1);
    return 1;
  }
}
