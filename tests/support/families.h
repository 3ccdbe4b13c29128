// The families tests run over, read from the model registry (and so from
// src/titan/models/families.h): a new family is tested without editing a
// test's list.
#pragma once

#include <string>
#include <vector>

#include "titan/models/model_spec.h"

namespace titan::testing {

// Families whose flavors are published config.json texts, in registry order:
// the ones tests/reference/hf_families.py is the parity reference of.
inline std::vector<std::string> families_from_hf_config() {
  std::vector<std::string> names;
  for (const std::string& name : models::model_names()) {
    if (models::model_spec(name).from_hf_config) names.push_back(name);
  }
  return names;
}

}  // namespace titan::testing
