// The `titan` executable. Each subcommand lives in its own file and registers
// itself with CLI11 here; titan::Error becomes one message and exit code 1.
#include <sched.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include "titan/cli/subcommands.h"
#include "titan/comm/flight_recorder.h"
#include "titan/comm/world.h"
#include "titan/core/error.h"
#include "titan/train/preemption.h"

namespace {

// How OpenMP's idle threads wait, unless the user chose (OMP_WAIT_POLICY or
// GOMP_SPINCOUNT). libgomp's default spins up to 300,000 times at every
// barrier before it sleeps: on a core another process also wants, the spinning
// thread takes the core from the thread everyone waits for (with one of 2
// cores busy, llama3 debug kept 46% of its speed, below the 50% share), and
// MPI ranks sharing cores spin against each other. Measured with `titan bench
// train --busy-cores 1` and 4 ranks on 2 cores (bench/README.md, "Sharing the CPU"):
//  - ranks x threads more than the CPUs this process may use: passive (no
//    spinning), the fastest when ranks share cores;
//  - otherwise a short spin (3,000): as fast as the default unloaded (faster
//    on 2 cores) and over half the speed with a core busy.
// libgomp reads both variables once, when it is loaded, and the C library
// resets the environment after the executable's preinit functions run, so the
// only way to set them is before the process starts: the commands that spend
// their time in OpenMP loops (train, bench, generate) re-execute themselves
// once with the variable set (about 0.1 s).
long environment_number(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr ? std::strtol(text, nullptr, 10) : 0;
}

void choose_omp_wait_policy(int argc, char** argv) {
  if (argc < 2 || std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  const std::string command = argv[1];
  if (command != "train" && command != "bench" && command != "generate") return;
  cpu_set_t allowed;
  const long cpus = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  const long ranks = std::max({1L, environment_number("OMPI_COMM_WORLD_LOCAL_SIZE"),
                               environment_number("MPI_LOCALNRANKS"), environment_number("SLURM_NTASKS_PER_NODE")});
  const long threads = environment_number("OMP_NUM_THREADS") > 0 ? environment_number("OMP_NUM_THREADS") : cpus;
  const bool shared = ranks * threads > cpus;
  setenv(shared ? "OMP_WAIT_POLICY" : "GOMP_SPINCOUNT", shared ? "passive" : "3000", /*overwrite=*/0);
  // Which one titan chose, so that peers it runs (bench) can wait as they would by default.
  setenv("TITAN_CHOSE_OMP_WAIT", shared ? "OMP_WAIT_POLICY" : "GOMP_SPINCOUNT", /*overwrite=*/1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

// Under a launcher, one rank's error must end every rank now (not after the
// others wait out a collective's timeout), after this rank's flight recorder
// dump (`why`: the error) shows what it was doing.
int end_job(int code, const char* why) {
  if (titan::comm::World::started_by_launcher()) {
    std::fflush(stderr);
    titan::comm::FlightRecorder::instance().dump(fmt::format("fatal error: {}", why), /*final=*/true);
    titan::comm::abort_job(code);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  choose_omp_wait_policy(argc, argv);
  // Before any thread exists, so that every thread titan, OpenMP, oneDNN and
  // MPI start later inherits the blocked SIGTERM/SIGINT/SIGUSR1 (train/preemption.h).
  titan::train::install_signal_thread();
  CLI::App app{"titan: pre-train Llama- and Qwen-style language models natively"};
  app.require_subcommand(1);
  app.set_version_flag("--version", TITAN_VERSION);
  std::vector<titan::cli::Subcommand> subcommands = titan::cli::all_subcommands();
  for (auto& subcommand : subcommands) subcommand.attach(app);
  try {
    app.parse(argc, argv);
    for (auto& subcommand : subcommands) {
      if (subcommand.app != nullptr && subcommand.app->parsed()) return subcommand.run();
    }
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const titan::Error& error) {
    std::fprintf(stderr, "titan: error: %s\n", error.what());
    return end_job(1, error.what());
  } catch (const std::filesystem::filesystem_error& error) {
    // A path the user gave (or its permissions, or a full disk), not a bug in titan.
    std::fprintf(stderr, "titan: error: %s\n", titan::printable_message(error.what()).c_str());
    return end_job(1, error.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(
        stderr, "titan: error: out of memory (an allocation failed); `titan estimate-memory` shows what a job needs\n");
    return end_job(1, "out of memory");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "titan: internal error: %s\n", titan::printable_message(error.what()).c_str());
    return end_job(2, error.what());
  }
  return 0;
}
