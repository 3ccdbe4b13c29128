// Named job configs, TorchTitan's current way of choosing one: `titan train
// --module llama3 --config llama3_debugmodel` picks
// share/titan/configs/llama3/llama3_debugmodel.toml. The module is the
// folder (TorchTitan's model folder); titan's own example configs, at the
// top of share/titan/configs, are module "titan". `--config FILE` without
// --module keeps reading a file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace titan::train {

struct RegisteredConfig {
  std::string module, name;
  std::filesystem::path path;
};

// Every registered config under share/titan/configs, by module then name.
std::vector<RegisteredConfig> registered_configs();
// The config `name` of `module`; fails naming the module's configs (or the modules) when there is none.
std::filesystem::path registered_config(const std::string& module, const std::string& name);

}  // namespace titan::train
