#include "titan/train/run_history.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/core/error.h"

namespace titan::train {

namespace fs = std::filesystem;

namespace {

// The folder a run is named after: "runs/a/" and "runs/a/metrics.jsonl" are
// both "a"; "." is named after the working directory.
std::string run_name(const fs::path& folder) {
  fs::path normal = folder.lexically_normal();
  if (!normal.has_filename()) normal = normal.parent_path();
  std::string name = normal.filename().string();
  if (name.empty() || name == "." || name == "..") {
    return fs::absolute(normal).lexically_normal().parent_path().filename().string();
  }
  return name;
}

double number_of(const nlohmann::json& value) {
  return value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
}

bool is_number_or_null(const nlohmann::json& value) { return value.is_number() || value.is_null(); }

}  // namespace

const MetricSeries* RunHistory::find(const std::string& metric) const {
  const auto it = metrics.find(metric);
  return it == metrics.end() ? nullptr : &it->second;
}

RunHistory parse_run_history(const std::string& text, const std::string& source) {
  // Whole records by step first: a resumed job's later record replaces the earlier one.
  std::map<int64_t, nlohmann::json> records;
  std::istringstream lines(text);
  int64_t line_number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for a number like 1E999
      fail("{}:{}: malformed metrics record ({})", source, line_number, error.what());
    }
    TITAN_CHECK(record.is_object(), "{}:{}: malformed metrics record (a JSON object expected, got {})", source,
                line_number, record.type_name());
    const auto step = record.find("step");
    if (step == record.end()) continue;
    // An unsigned step past int64 would wrap to a negative one.
    TITAN_CHECK(
        step->is_number_integer() &&
            (!step->is_number_unsigned() || step->get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()}),
        "{}:{}: malformed metrics record (\"step\" must be an integer, got {})", source, line_number, step->dump());
    // Read before the move: in an assignment the right side is evaluated first.
    const int64_t step_number = step->get<int64_t>();
    records[step_number] = std::move(record);
  }

  RunHistory history;
  for (const auto& [step, record] : records) {
    history.steps.push_back(step);
    for (const auto& [key, value] : record.items()) {
      if (key == "step") continue;
      if (is_number_or_null(value)) {
        history.metrics[key][step] = number_of(value);
      } else if (value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i) {
          if (is_number_or_null(value[i])) history.metrics[fmt::format("{}/{}", key, i)][step] = number_of(value[i]);
        }
      }
      // Strings, booleans and nested objects are not series; they are left out.
    }
  }
  return history;
}

RunHistory read_run_history(const fs::path& run) {
  const bool is_folder = fs::is_directory(run);
  const fs::path metrics_path = is_folder ? run / "metrics.jsonl" : run;
  TITAN_CHECK(fs::exists(run), "{}: no such run folder or metrics file", run.string());
  TITAN_CHECK(fs::is_regular_file(metrics_path), "{}: no metrics.jsonl in the run folder {}", metrics_path.string(),
              run.string());
  std::ifstream file(metrics_path, std::ios::binary);
  TITAN_CHECK(file.good(), "{}: cannot be read", metrics_path.string());
  std::ostringstream text;
  text << file.rdbuf();
  TITAN_CHECK(!file.bad(), "{}: cannot be read", metrics_path.string());

  RunHistory history = parse_run_history(text.str(), metrics_path.string());
  history.metrics_path = metrics_path;
  history.name = run_name(is_folder ? run : metrics_path.parent_path());
  return history;
}

}  // namespace titan::train
