#include "titan/core/share_dir.h"

#include <cstdlib>

namespace titan {

std::optional<std::filesystem::path> share_dir() {
  if (const char* env = std::getenv("TITAN_DATA_DIR"); env != nullptr && *env != '\0') {
    return std::filesystem::path(env);
  }
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return std::nullopt;
  const std::filesystem::path dir = exe.parent_path().parent_path() / "share" / "titan";
  if (!std::filesystem::is_directory(dir, error)) return std::nullopt;
  return dir;
}

const char* share_dir_help() {
  return "titan reads its data from share/titan beside the folder of its binary (build/share/titan in a build "
         "tree, PREFIX/share/titan once installed) or from $TITAN_DATA_DIR; rebuild after scripts/setup.sh, or "
         "reinstall";
}

}  // namespace titan
