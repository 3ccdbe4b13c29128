// `--json FILE` of every benchmark suite: the results as indented JSON,
// written so that a failure (a full disk) is an error naming the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace titan::bench {

// Does nothing when `path` is empty (no --json given).
void write_json_report(const std::string& path, const nlohmann::json& results);

}  // namespace titan::bench
