#include "bench/peer_process.h"

#include <array>
#include <cstdio>
#include <memory>

namespace titan::bench {

std::optional<nlohmann::json> run_peer(const std::string& command, const char* what) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), &pclose);
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

}  // namespace titan::bench
