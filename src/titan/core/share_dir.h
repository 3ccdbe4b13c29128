// Where titan's installed data lives (built-in tokenizers, benchmark peers,
// example configs): share/titan beside the binary's bin/ folder, in the build
// tree and in an installed prefix alike. Never the source tree.
#pragma once

#include <filesystem>
#include <optional>

namespace titan {

// $TITAN_DATA_DIR when set, else <folder of the running executable>/../share/titan
// when that folder exists; nullopt otherwise.
std::optional<std::filesystem::path> share_dir();

// What to tell a user when a file under share_dir() is missing.
const char* share_dir_help();

}  // namespace titan
