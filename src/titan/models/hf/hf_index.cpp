#include "titan/models/hf/hf_index.h"

#include <nlohmann/json.hpp>

#include <set>

#include "titan/core/error.h"

namespace titan::models {

std::vector<std::string> HfIndex::files() const {
  std::set<std::string> unique;
  for (const auto& [tensor, file] : weight_map) unique.insert(file);
  return {unique.begin(), unique.end()};
}

HfIndex parse_hf_index(std::string_view json_text, const std::string& source, const std::string& suffix) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: not valid JSON: {}", source, error.what());
  }
  TITAN_CHECK(json.is_object(), "{}: index is not a JSON object", source);
  HfIndex index;
  if (json.contains("metadata") && !json["metadata"].is_null()) {
    const auto& metadata = json["metadata"];
    TITAN_CHECK(metadata.is_object(), "{}: 'metadata' is not an object", source);
    if (metadata.contains("total_size")) {
      const auto& total = metadata["total_size"];
      // Some writers store it as a float; any non-negative whole number is fine.
      TITAN_CHECK(total.is_number_unsigned() ||
                      (total.is_number_float() && total.get<double>() >= 0.0 && total.get<double>() < 1.8e19),
                  "{}: metadata.total_size must be a non-negative number, got {}", source, total.dump());
      index.total_size =
          total.is_number_unsigned() ? total.get<uint64_t>() : static_cast<uint64_t>(total.get<double>());
    }
  }
  TITAN_CHECK(json.contains("weight_map"), "{}: no 'weight_map'", source);
  const auto& map = json["weight_map"];
  TITAN_CHECK(map.is_object(), "{}: 'weight_map' is not an object", source);
  TITAN_CHECK(!map.empty(), "{}: 'weight_map' is empty", source);
  for (const auto& [tensor, file] : map.items()) {
    TITAN_CHECK(!tensor.empty(), "{}: 'weight_map' has an empty tensor name", source);
    TITAN_CHECK(file.is_string(), "{}: tensor '{}' maps to {}, not a file name", source, tensor, file.dump());
    const std::string name = file.get<std::string>();
    const bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                       name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
    TITAN_CHECK(
        plain && name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0,
        "{}: tensor '{}' maps to '{}', not a {} file in this folder", source, tensor, name, suffix);
    index.weight_map[tensor] = name;
  }
  return index;
}

std::string hf_index_json(const HfIndex& index) {
  nlohmann::ordered_json json;
  json["metadata"] = {{"total_size", index.total_size}};
  json["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [tensor, file] : index.weight_map) json["weight_map"][tensor] = file;
  return json.dump(2) + "\n";
}

}  // namespace titan::models
