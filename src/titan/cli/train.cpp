// `titan train --config FILE [--section.key value ...]`: the main job.
#include <cstdio>
#include <memory>

#include "titan/cli/subcommands.h"
#include "titan/comm/world.h"
#include "titan/core/error.h"
#include "titan/train/config_loader.h"
#include "titan/train/flux/flux_job.h"
#include "titan/train/trainer.h"

namespace titan::cli {

namespace {

// Ranks failing alike in start-up reach it within moments of each other: they
// run the same checks on the same files.
constexpr double kStartupAgreementSeconds = 15.0;

}  // namespace

Subcommand make_train_subcommand() {
  auto app_ptr = std::make_shared<CLI::App*>(nullptr);
  Subcommand subcommand;
  subcommand.add = [app_ptr](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("train", "train a model from a TOML job config (--help lists every key)");
    // Config keys are open-ended (--section.key value): collect them ourselves.
    app->allow_extras();
    app->set_help_flag();
    app->prefix_command();
    *app_ptr = app;
    return app;
  };
  subcommand.run = [app_ptr] {
    std::unique_ptr<train::Trainer> trainer;
    std::unique_ptr<train::flux::FluxTrainer> flux_trainer;
    try {
      train::TrainArguments args = train::parse_train_arguments((*app_ptr)->remaining());
      if (args.help) {
        std::printf("%s", train::config_help().c_str());
        return 0;
      }
      if (args.print_config) {
        std::printf("%s", train::config_to_toml(args.config).c_str());
        return 0;
      }
      if (args.config.model.name == "flux") {
        flux_trainer = train::flux::make_flux_trainer(args.config);
      } else {
        trainer = std::make_unique<train::Trainer>(args.config);
      }
    } catch (const Error& error) {
      // A start-up error (a config key, a missing file) is met alike by every
      // rank of a launched job: when all of them agree they failed here, rank
      // 0 says why and every rank ends normally, with no abort and no flight
      // recorder dump. Otherwise one rank's problem ends the job now (main).
      if (!comm::World::started_by_launcher() ||
          !comm::World::instance().every_rank_failed_startup(kStartupAgreementSeconds))
        throw;
      if (comm::World::instance().rank() == 0) std::fprintf(stderr, "titan: error: %s\n", error.what());
      return 1;
    }
    if (flux_trainer) {
      flux_trainer->train();
    } else {
      trainer->train();
    }
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
