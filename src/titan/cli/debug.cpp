// `titan debug flight-recorder DIR`: reads the flight recorder dumps a job left
// (comm.save_traces_folder under job.dump_folder, one rank_<N>.json per rank)
// and names the first collective the ranks disagree on, never all reached, or
// did not finish, with the ranks on each side. Exit codes are for scripts:
// 0 nothing wrong, 1 a culprit found, 2 unreadable input.
#include <cstdio>
#include <memory>
#include <string>

#include "titan/cli/subcommands.h"
#include "titan/comm/flight_recorder_analysis.h"
#include "titan/core/error.h"

namespace titan::cli {

Subcommand make_debug_subcommand() {
  auto folder = std::make_shared<std::string>();
  Subcommand subcommand;
  subcommand.add = [folder](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("debug", "look into what a job left behind");
    app->require_subcommand(1);
    CLI::App* flight = app->add_subcommand(
        "flight-recorder",
        "line up the ranks' flight recorder dumps (written on a collective timeout, a fatal error or SIGUSR1) and name "
        "the first collective on which ranks disagree, that some rank never reached, or that did not complete. Exit "
        "0: all agree and completed; 1: a culprit was found; 2: bad input");
    flight->add_option("dir", *folder, "the dumps' folder (job.dump_folder/comm.save_traces_folder)")->required();
    return app;
  };
  subcommand.run = [folder] {
    std::vector<comm::FlightDump> dumps;
    try {
      dumps = comm::read_flight_dumps(*folder);
    } catch (const Error& error) {
      // Bad input is its own exit code: 1 means "found the culprit".
      std::fprintf(stderr, "titan: error: %s\n", error.what());
      return 2;
    }
    const comm::FlightAnalysis analysis = comm::analyse_flight_dumps(dumps);
    std::fputs(analysis.report.c_str(), stdout);
    return analysis.exit_code;
  };
  return subcommand;
}

}  // namespace titan::cli
