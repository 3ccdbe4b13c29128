#include "bench/peer_process.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "titan/core/error.h"
#include "titan/core/share_dir.h"

namespace titan::bench {

std::optional<nlohmann::json> run_peer(const std::string& command, const char* what) {
  // The peer waits in its OpenMP barriers as it would on its own: not as titan
  // chose for itself (cli/main.cpp names the variable it set, if it set one).
  const char* chosen = std::getenv("TITAN_CHOSE_OMP_WAIT");
  const std::string line =
      chosen != nullptr ? fmt::format("env -u {} -u TITAN_CHOSE_OMP_WAIT {}", chosen, command) : command;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(line.c_str(), "r"), &pclose);
  if (!pipe) return std::nullopt;
  std::string output;
  std::array<char, 512> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe.get()) != nullptr) output += buffer.data();
  try {
    const size_t start = output.rfind('{');
    if (start != std::string::npos) return nlohmann::json::parse(output.substr(start));
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "%s: the peer failed (%s):\n%s\n", what, command.c_str(), output.c_str());
  return std::nullopt;
}

std::string shared_file(const std::string& relative) {
  const auto share = share_dir();
  std::error_code error;
  TITAN_CHECK(share && std::filesystem::exists(*share / relative, error), "{} is not installed{}: {}", relative,
              share ? " in " + share->string() : std::string(), share_dir_help());
  return (*share / relative).string();
}

}  // namespace titan::bench
