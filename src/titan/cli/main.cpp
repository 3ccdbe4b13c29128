// The `titan` executable. Each subcommand lives in its own file and registers
// itself with CLI11 here; titan::Error becomes one message and exit code 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>

#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/distributed/flight_recorder.h"
#include "titan/distributed/world.h"
#include "titan/train/preemption.h"

namespace {

// Under a launcher, one rank's error must end every rank now (not after the
// others wait out a collective's timeout), after this rank's flight recorder
// dump (`why`: the error) shows what it was doing.
int end_job(int code, const char* why) {
  if (titan::distributed::World::started_by_launcher()) {
    std::fflush(stderr);
    titan::distributed::FlightRecorder::instance().dump(fmt::format("fatal error: {}", why), /*final=*/true);
    titan::distributed::abort_job(code);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
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
    std::fprintf(stderr, "titan: error: %s\n", error.what());
    return end_job(1, error.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(
        stderr, "titan: error: out of memory (an allocation failed); `titan estimate-memory` shows what a job needs\n");
    return end_job(1, "out of memory");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "titan: internal error: %s\n", error.what());
    return end_job(2, error.what());
  }
  return 0;
}
