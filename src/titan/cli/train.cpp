// `titan train --config FILE [--section.key value ...]`: the main job.
#include <cstdio>
#include <memory>

#include "titan/cli/subcommands.h"
#include "titan/train/config_loader.h"
#include "titan/train/trainer.h"

namespace titan::cli {

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
    train::TrainArguments args = train::parse_train_arguments((*app_ptr)->remaining());
    if (args.help) {
      std::printf("%s", train::config_help().c_str());
      return 0;
    }
    if (args.print_config) {
      std::printf("%s", train::config_to_toml(args.config).c_str());
      return 0;
    }
    train::Trainer trainer(args.config);
    trainer.train();
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
