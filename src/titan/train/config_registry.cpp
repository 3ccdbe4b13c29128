#include "titan/train/config_registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "titan/core/error.h"
#include "titan/core/share_dir.h"

namespace titan::train {

namespace fs = std::filesystem;

std::vector<RegisteredConfig> registered_configs() {
  const auto share = share_dir();
  TITAN_CHECK(share.has_value() && fs::is_directory(*share / "configs"), "no registered configs: {}", share_dir_help());
  const fs::path root = *share / "configs";
  std::vector<RegisteredConfig> found;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".toml") continue;
    const fs::path relative = fs::relative(entry.path(), root);
    const std::string module = relative.has_parent_path() ? relative.parent_path().string() : "titan";
    found.push_back({module, entry.path().stem().string(), entry.path()});
  }
  std::sort(found.begin(), found.end(), [](const RegisteredConfig& a, const RegisteredConfig& b) {
    return std::tie(a.module, a.name) < std::tie(b.module, b.name);
  });
  return found;
}

fs::path registered_config(const std::string& module, const std::string& name) {
  const std::vector<RegisteredConfig> configs = registered_configs();
  std::set<std::string> modules;
  std::vector<std::string> names;
  for (const RegisteredConfig& config : configs) {
    modules.insert(config.module);
    if (config.module != module) continue;
    if (config.name == name) return config.path;
    names.push_back(config.name);
  }
  TITAN_CHECK(!names.empty(), "--module {}: no such module (registered: {}; `titan config list` shows them all)",
              module, fmt::join(modules, ", "));
  fail("--module {} --config {}: no such config (module {} has {}; `titan config list` shows them all)", module, name,
       module, fmt::join(names, ", "));
}

}  // namespace titan::train
