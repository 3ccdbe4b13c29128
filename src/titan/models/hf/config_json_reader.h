// Reading the keys of a model's config.json (Hugging Face, Diffusers) with
// errors that name the file and the key: integers in a range, positive
// numbers, booleans, strings, lists of layer indices; absent or null keys
// leave the caller's default. Shared by every config.json parser, each of
// which is fuzzed.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "titan/core/error.h"

namespace titan::models {

class ConfigJsonReader {
 public:
  ConfigJsonReader(const nlohmann::json& json, const std::string& source) : json_(json), source_(source) {}

  bool has(const char* key) const { return json_.contains(key) && !json_[key].is_null(); }
  // Present and null: where a family's default is a value, null means "none" (a window, a soft-cap).
  bool is_null(const char* key) const { return json_.contains(key) && json_[key].is_null(); }

  void get(const char* key, int64_t& value, int64_t min, int64_t max) const {
    if (!has(key)) return;
    const nlohmann::json& v = json_[key];
    TITAN_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", source_, key, v.dump());
    // Unsigned JSON integers may not fit int64: compare them unsigned first.
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(max) &&
                                                       static_cast<int64_t>(v.get<uint64_t>()) >= min
                                                 : v.get<int64_t>() >= min && v.get<int64_t>() <= max;
    TITAN_CHECK(in_range, "{}: '{}' = {} is outside [{}, {}]", source_, key, v.dump(), min, max);
    value = v.get<int64_t>();
  }
  void get_positive(const char* key, int64_t& value, int64_t max) const { get(key, value, 1, max); }
  // The keys that give the weights their shapes: a class default (transformers' 4096 for
  // hidden_size) would build some other model and fail later on a tensor shape.
  void get_required(const char* key, int64_t& value, int64_t max) const {
    TITAN_CHECK(has(key), "{}: required key '{}' is missing{}", source_, key,
                json_.contains(key) ? " (it is null)" : "");
    get_positive(key, value, max);
  }

  void get(const char* key, double& value) const {
    if (!has(key)) return;
    const nlohmann::json& v = json_[key];
    TITAN_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", source_, key, v.dump());
    value = v.get<double>();
    TITAN_CHECK(std::isfinite(value) && value > 0.0, "{}: '{}' must be a positive number, got {}", source_, key,
                v.dump());
  }

  void get_non_negative(const char* key, double& value) const {
    if (!has(key)) return;
    const nlohmann::json& v = json_[key];
    TITAN_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0.0,
                "{}: '{}' must be a number >= 0, got {}", source_, key, v.dump());
    value = v.get<double>();
  }

  // A list of layer indices, each in [0, layers).
  void get_layers(const char* key, std::vector<int64_t>& value, int64_t layers) const {
    if (!has(key)) return;
    const nlohmann::json& v = json_[key];
    TITAN_CHECK(v.is_array(), "{}: '{}' must be a list of layer indices, got {}", source_, key, v.dump());
    value.clear();
    for (const nlohmann::json& item : v) {
      TITAN_CHECK(item.is_number_integer() && item.get<int64_t>() >= 0 && item.get<int64_t>() < layers,
                  "{}: '{}' holds {}, which is not a layer index in [0, {})", source_, key, item.dump(), layers);
      value.push_back(item.get<int64_t>());
    }
  }

  void get(const char* key, bool& value) const {
    if (!has(key)) return;
    TITAN_CHECK(json_[key].is_boolean(), "{}: '{}' must be true or false, got {}", source_, key, json_[key].dump());
    value = json_[key].get<bool>();
  }

  std::string get_string(const char* key) const {
    if (!has(key)) return "";
    TITAN_CHECK(json_[key].is_string(), "{}: '{}' must be a string, got {}", source_, key, json_[key].dump());
    return json_[key].get<std::string>();
  }

  // Features titan's decoder does not have must be off (absent, or the value that means off).
  void require_off(const char* key, const std::string& architecture) const {
    bool on = false;
    get(key, on);
    TITAN_CHECK(!on, "{}: '{}' = true is not supported for {} (titan's decoder has no such feature)", source_, key,
                architecture);
  }
  // Dropout probabilities must be zero: titan's decoder has no dropout.
  void require_zero(const char* key, const std::string& architecture) const {
    double value = 0.0;
    get_non_negative(key, value);
    TITAN_CHECK(value == 0.0, "{}: '{}' = {} is not supported for {} (titan's decoder has no dropout; set it to 0)",
                source_, key, json_[key].dump(), architecture);
  }

 private:
  const nlohmann::json& json_;
  const std::string& source_;
};

}  // namespace titan::models
