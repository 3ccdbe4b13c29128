// `titan bench <suite>`: benchmarks that compare against a peer in the same run.
#include <memory>

#include "bench/ops_bench.h"
#include "titan/cli/subcommands.h"

namespace titan::cli {

Subcommand make_bench_subcommand() {
  auto options = std::make_shared<bench::OpsBenchOptions>();
  auto suite = std::make_shared<std::string>();
  Subcommand subcommand;
  subcommand.add = [options, suite](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("bench", "run a benchmark suite (ops)");
    app->add_option("suite", *suite, "which suite: ops")->required()->check(CLI::IsMember({"ops"}));
    app->add_option("--repeats", options->repeats, "timed repetitions per case (median reported)")
        ->check(CLI::PositiveNumber);
    app->add_flag("--quick", options->quick, "small shapes only (smoke test)");
    app->add_option("--json", options->json_path, "also write the results to this JSON file");
    return app;
  };
  subcommand.run = [options, suite] { return bench::run_ops_bench(*options); };
  return subcommand;
}

}  // namespace titan::cli
