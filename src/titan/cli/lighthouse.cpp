// `titan lighthouse`: the quorum service of fault-tolerant training
// (TorchFT's torchft_lighthouse, with its flags): replica groups started with
// fault_tolerance.enable and TORCHFT_LIGHTHOUSE=host:port meet here each step
// (comm/lighthouse_server.h). Runs until SIGINT or SIGTERM.
#include <cstdio>
#include <memory>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/comm/lighthouse_server.h"

namespace titan::cli {

Subcommand make_lighthouse_subcommand() {
  auto options = std::make_shared<comm::LighthouseServer::Options>();
  Subcommand subcommand;
  subcommand.add = [options](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand(
        "lighthouse", "the quorum service replica groups of a fault-tolerant job meet at (TORCHFT_LIGHTHOUSE)");
    app->add_option("--bind", options->bind, "host:port to listen on (port 0: any free port, printed)")
        ->capture_default_str();
    app->add_option("--min_replicas", options->quorum.min_replicas, "fewest replica groups a quorum may have")
        ->capture_default_str()
        ->check(at_least(1));
    app->add_option("--join_timeout_ms", options->quorum.join_timeout_ms,
                    "how long a quorum waits for live groups that have not joined yet")
        ->capture_default_str()
        ->check(at_least(0));
    app->add_option("--quorum_tick_ms", options->quorum_tick_ms, "how often pending quorums are re-checked")
        ->capture_default_str()
        ->check(at_least(1));
    app->add_option("--heartbeat_timeout_ms", options->quorum.heartbeat_timeout_ms,
                    "a group silent for longer is taken for dead and left out of quorums")
        ->capture_default_str()
        ->check(at_least(1));
    return app;
  };
  subcommand.run = [options] {
    comm::LighthouseServer server(*options);
    std::printf("titan: lighthouse listening on port %d (min_replicas %lld, join_timeout_ms %lld)\n", server.port(),
                static_cast<long long>(options->quorum.min_replicas),
                static_cast<long long>(options->quorum.join_timeout_ms));
    std::fflush(stdout);
    // Until SIGINT or SIGTERM, which end the process (cli/main.cpp's signal
    // thread: no job to stop cleanly). Its state is in memory only.
    server.serve();
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
