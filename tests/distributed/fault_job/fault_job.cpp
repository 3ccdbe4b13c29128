// A tiny distributed job that fails on purpose, for the fault tests in
// tests/distributed_local/fault_test.cpp (run under mpirun):
//   titan_fault_job kill  RANK          RANK dies (SIGKILL) after the first all_reduce
//   titan_fault_job stall RANK TIMEOUT  RANK sleeps instead of joining the second all_reduce
//   titan_fault_job error RANK          RANK throws titan::Error between two all_reduces
// Every other rank keeps issuing all_reduces; the tests check how the job ends.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "titan/distributed/world.h"

namespace {

using titan::distributed::ReduceOp;
using titan::distributed::World;

void all_reduce_once(World& world, int step) {
  const titan::Tensor tensor = titan::Tensor::full({4}, 1.0);
  world.group()->all_reduce(tensor, ReduceOp::sum)->wait();
  std::printf("fault_job: rank %d: all_reduce %d done\n", world.rank(), step);
  std::fflush(stdout);
}

int run(const std::string& mode, int faulty, double timeout_seconds) {
  World& world = World::instance(timeout_seconds);
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
  if (argc < 3) {
    std::fprintf(stderr, "usage: titan_fault_job kill|stall|error RANK [TIMEOUT_SECONDS]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int faulty = std::atoi(argv[2]);
  const double timeout_seconds = argc > 3 ? std::atof(argv[3]) : 60.0;
  try {
    return run(mode, faulty, timeout_seconds);
  } catch (const titan::Error& error) {
    // What the CLI should do in a launched job: peers blocked in a collective
    // with this rank would otherwise wait out the whole timeout.
    std::fprintf(stderr, "titan: error on rank %d: %s\n", World::instance().rank(), error.what());
    if (World::instance().size() > 1) titan::distributed::abort_job(1);
    return 1;
  }
}
