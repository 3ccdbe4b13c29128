// The lists of families people read, the README's "Supported models" table and
// the help lines of model.name and model.hf_config, against the registry, so
// that a family added, renamed or given a new flavor cannot leave them stale.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "titan/models/model_spec.h"
#include "titan/train/job_config.h"

namespace titan {
namespace documented_lists_test {

using FlavorTable = std::map<std::string, std::set<std::string>>;

std::string read_readme() {
  std::ifstream in(std::string(TITAN_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> backticked(const std::string& text) {
  std::set<std::string> words;
  const std::regex word("`([^`]+)`");
  for (std::sregex_iterator it(text.begin(), text.end(), word), end; it != end; ++it) words.insert((*it)[1]);
  return words;
}

// The rows "| `family` | `flavor`, `flavor` (note) ... | ... |" of the section.
FlavorTable readme_model_table(const std::string& readme) {
  const size_t start = readme.find("\n## Supported models\n");
  if (start == std::string::npos) return {};
  const size_t end = readme.find("\n## ", start + 1);
  std::istringstream section(readme.substr(start, end - start));
  FlavorTable table;
  for (std::string line; std::getline(section, line);) {
    if (!line.starts_with("| `")) continue;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() < 2) continue;
    const std::set<std::string> family = backticked(cells[0]);
    if (family.size() == 1) table[*family.begin()] = backticked(cells[1]);
  }
  return table;
}

TEST(DocumentedLists, TheReadmesModelTableIsTheRegistry) {
  FlavorTable registry;
  for (const std::string& name : models::model_names()) {
    const auto& flavors = models::model_spec(name).flavors;
    registry[name] = std::set<std::string>(flavors.begin(), flavors.end());
  }
  const FlavorTable readme = readme_model_table(read_readme());
  ASSERT_FALSE(readme.empty()) << "README.md has no '## Supported models' table of `family` | `flavor`, ... rows";
  EXPECT_EQ(readme, registry);
}

// Collects the help line of one key of a config section.
class HelpOf : public train::ConfigVisitor {
 public:
  explicit HelpOf(std::string key) : key_(std::move(key)) {}
  void field(const char* key, std::string&, const char* help) override { keep(key, help); }
  void field(const char* key, int64_t&, const char* help) override { keep(key, help); }
  void field(const char* key, double&, const char* help) override { keep(key, help); }
  void field(const char* key, bool&, const char* help) override { keep(key, help); }
  void field(const char* key, std::vector<std::string>&, const char* help) override { keep(key, help); }
  std::string help;

 private:
  void keep(const char* key, const char* text) {
    if (key_ == key) help = text;
  }
  std::string key_;
};

std::string model_help(const std::string& key) {
  train::ModelSection section;
  HelpOf visitor(key);
  section.visit(visitor);
  return visitor.help;
}

TEST(DocumentedLists, ModelKeysHelpNamesEveryFamilyAndArchitecture) {
  const std::string names = model_help("name"), hf_config = model_help("hf_config");
  for (const std::string& name : models::model_names()) {
    // Whole words: "qwen3" inside "qwen3_moe" does not count.
    EXPECT_TRUE(std::regex_search(names, std::regex("\\b" + name + "\\b"))) << name << " not in: " << names;
    const auto hf_family = models::model_spec(name).hf_family;
    if (hf_family == nullptr) continue;
    const std::string architecture = hf_family().architecture;
    EXPECT_NE(hf_config.find(architecture), std::string::npos) << architecture << " not in: " << hf_config;
  }
}

}  // namespace documented_lists_test
}  // namespace titan
