// One list of fields per config section drives everything done with configs:
// TOML loading, --section.key overrides, --help, --print-config. A section is
// a plain struct with `void visit(ConfigVisitor&)` naming each field, its
// TOML key and a help line; visitors do the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan::train {

class ConfigVisitor {
 public:
  virtual ~ConfigVisitor() = default;
  virtual void field(const char* key, std::string& value, const char* help) = 0;
  virtual void field(const char* key, int64_t& value, const char* help) = 0;
  virtual void field(const char* key, double& value, const char* help) = 0;
  virtual void field(const char* key, bool& value, const char* help) = 0;
  virtual void field(const char* key, std::vector<std::string>& value, const char* help) = 0;
};

}  // namespace titan::train
