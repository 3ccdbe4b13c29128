// `titan config list` and `titan config show MODULE/NAME`: the registered job
// configs (train/config_registry.h) that `titan train --module M --config N`
// runs.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/train/config_registry.h"

namespace titan::cli {

Subcommand make_config_subcommand() {
  auto name = std::make_shared<std::string>();
  auto list = std::make_shared<CLI::App*>(nullptr);
  auto show = std::make_shared<CLI::App*>(nullptr);
  Subcommand subcommand;
  subcommand.add = [name, list, show](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("config", "the registered job configs (titan train --module M --config N)");
    app->require_subcommand(1);
    *list = app->add_subcommand("list", "every registered config: module, name and file");
    *show = app->add_subcommand("show", "print a registered config's TOML");
    (*show)->add_option("name", *name, "MODULE/NAME, as `titan config list` prints it")->required();
    return app;
  };
  subcommand.run = [name, list, show] {
    if ((*list)->parsed()) {
      for (const train::RegisteredConfig& config : train::registered_configs()) {
        std::printf("%-8s %-24s %s\n", config.module.c_str(), config.name.c_str(), config.path.c_str());
      }
      return 0;
    }
    const size_t slash = name->rfind('/');
    TITAN_CHECK(slash != std::string::npos,
                "titan config show {}: expected MODULE/NAME (e.g. llama3/llama3_debugmodel)", *name);
    const std::string path = train::registered_config(name->substr(0, slash), name->substr(slash + 1)).string();
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    std::printf("# %s\n%s", path.c_str(), text.str().c_str());
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
