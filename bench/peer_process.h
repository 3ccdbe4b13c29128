// Runs a peer program (a PyTorch or Node script) and reads the JSON object it
// prints last, so suites can compare against it in the same run.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace titan::bench {

// The last {...} the command printed on stdout; nullopt (with its output on
// stderr, prefixed by `what`) when it failed or printed none.
std::optional<nlohmann::json> run_peer(const std::string& command, const char* what);

// A file the benchmarks ship under share/titan (a peer script such as
// "bench/train_peer.py", a job config): its path, or a titan::Error saying where
// titan looked.
std::string shared_file(const std::string& relative);

}  // namespace titan::bench
