// `titan compare RUN_A RUN_B [--rtol R] [--atol A] [--metrics loss,lr]`: the
// two runs' metrics step by step, per metric bitwise equal, within tolerance,
// or the first step it diverges. Exit 0 when they match, 1 when a metric
// diverges, 2 for input that cannot be compared (so scripts can tell a
// divergence from a typo in a path).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/train/run_comparison.h"

namespace titan::cli {

namespace {

struct CompareArguments {
  std::string run_a, run_b;
  train::CompareOptions options;
};

constexpr int kMatch = 0, kDiverges = 1, kBadInput = 2;

}  // namespace

Subcommand make_compare_subcommand() {
  auto args = std::make_shared<CompareArguments>();
  Subcommand subcommand;
  subcommand.add = [args](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand(
        "compare", "compare two runs' metrics step by step (exit 0: match, 1: a metric diverges, 2: bad input)");
    app->add_option("run_a", args->run_a, "dump folder (or metrics.jsonl) of run A")->required();
    app->add_option("run_b", args->run_b, "dump folder (or metrics.jsonl) of run B")->required();
    app->add_option("--rtol", args->options.rtol, "relative tolerance: |a - b| <= atol + rtol * max(|a|, |b|)")
        ->capture_default_str()
        ->check(at_least(0, /*whole=*/false));
    app->add_option("--atol", args->options.atol, "absolute tolerance (0 and rtol 0: bitwise equality)")
        ->capture_default_str()
        ->check(at_least(0, /*whole=*/false));
    app->add_option("--metrics", args->options.metrics,
                    fmt::format("metrics to compare, comma-separated (default: {})",
                                fmt::join(train::deterministic_metrics(), ",")))
        ->delimiter(',');
    app->add_flag("--common-steps", args->options.common_steps_only,
                  "compare only the steps both runs logged (by default a step only one run has, as when a run "
                  "stopped early, makes the runs differ)");
    return app;
  };
  subcommand.run = [args] {
    try {
      const train::RunHistory a = train::read_run_history(args->run_a);
      const train::RunHistory b = train::read_run_history(args->run_b);
      const train::RunComparison comparison = train::compare_runs(a, b, args->options);
      std::printf("%s", train::format_comparison(a, b, args->options, comparison).c_str());
      return comparison.match() ? kMatch : kDiverges;
    } catch (const Error& error) {
      std::fprintf(stderr, "titan: error: %s\n", error.what());
      return kBadInput;
    } catch (const std::filesystem::filesystem_error& error) {
      std::fprintf(stderr, "titan: error: %s\n", error.what());
      return kBadInput;
    }
  };
  return subcommand;
}

}  // namespace titan::cli
