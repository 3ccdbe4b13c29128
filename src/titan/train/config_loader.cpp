#include "titan/train/config_loader.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "titan/core/error.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/lora_targets.h"
#include "titan/parallel/context_parallel_options.h"
#include "titan/train/config_registry.h"
#include "titan/train/torchtitan_keys.h"

namespace titan::train {
namespace {

// ---- small visitors over one section's fields ---------------------------

class KeyCollector : public ConfigVisitor {
 public:
  std::vector<std::string> keys;
  void field(const char* key, std::string&, const char*) override { keys.push_back(key); }
  void field(const char* key, int64_t&, const char*) override { keys.push_back(key); }
  void field(const char* key, double&, const char*) override { keys.push_back(key); }
  void field(const char* key, bool&, const char*) override { keys.push_back(key); }
  void field(const char* key, std::vector<std::string>&, const char*) override { keys.push_back(key); }
};

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = closest_match(word, candidates);
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

std::vector<std::string> section_names(JobConfig& config) {
  std::vector<std::string> names;
  config.for_each_section([&](const char* name, auto&) { names.emplace_back(name); });
  return names;
}

std::string where(const toml::node& node, const std::string& source) {
  const auto& begin = node.source().begin;
  return begin.line > 0 ? fmt::format("{}:{}", source, begin.line) : source;
}

// Assigns a section's fields from a TOML table, checking each value's type.
class TomlReader : public ConfigVisitor {
 public:
  TomlReader(const toml::table& table, std::string section, std::string source)
      : table_(table), section_(std::move(section)), source_(std::move(source)) {}

  void field(const char* key, std::string& value, const char*) override {
    if (const toml::node* node = find(key)) value = expect<std::string>(*node, key, "a string");
  }
  void field(const char* key, int64_t& value, const char*) override {
    if (const toml::node* node = find(key)) value = expect<int64_t>(*node, key, "an integer");
  }
  void field(const char* key, double& value, const char*) override {
    if (const toml::node* node = find(key)) {
      if (node->is_integer()) {
        value = static_cast<double>(node->value<int64_t>().value());
      } else {
        value = expect<double>(*node, key, "a number");
      }
    }
  }
  void field(const char* key, bool& value, const char*) override {
    if (const toml::node* node = find(key)) value = expect<bool>(*node, key, "true or false");
  }
  void field(const char* key, std::vector<std::string>& value, const char*) override {
    const toml::node* node = find(key);
    if (node == nullptr) return;
    const toml::array* array = node->as_array();
    TITAN_CHECK(array != nullptr, "{}: [{}] {} must be an array of strings", where(*node, source_), section_, key);
    value.clear();
    for (const toml::node& item : *array) {
      // An inner array of strings (module_fqns_per_model_part's parts) is kept as one space-separated item.
      if (const toml::array* inner = item.as_array()) {
        std::string joined;
        for (const toml::node& word : *inner) {
          if (!joined.empty()) joined.push_back(' ');
          joined.append(expect<std::string>(word, key, "a string"));
        }
        value.push_back(joined);
      } else {
        value.push_back(expect<std::string>(item, key, "a string"));
      }
    }
  }

 private:
  // A dotted key ([quantize]'s linear.float8.recipe_name) is a path through nested tables.
  const toml::node* find(const char* key) {
    return std::strchr(key, '.') == nullptr ? table_.get(key) : table_.at_path(key).node();
  }

  template <typename T>
  T expect(const toml::node& node, const char* key, const char* what) {
    std::optional<T> value = node.value_exact<T>();
    TITAN_CHECK(value.has_value(), "{}: [{}] {} must be {}", where(node, source_), section_, key, what);
    return *value;
  }

  const toml::table& table_;
  std::string section_, source_;
};

// What a bare `--section.key` (no value) carries: true for a boolean key, an error for any other.
const std::string kBareFlag = "\x01 no value";

// Parses one override's text into the field it names.
class OverrideSetter : public ConfigVisitor {
 public:
  OverrideSetter(std::string key, std::string text, std::string dotted)
      : key_(std::move(key)), text_(std::move(text)), dotted_(std::move(dotted)) {}
  bool matched = false;

  void field(const char* key, std::string& value, const char*) override {
    if (key_ == key) set(value, valued_text());
  }
  void field(const char* key, int64_t& value, const char*) override {
    if (key_ != key) return;
    valued_text();
    int64_t parsed = 0;
    auto [end, error] = std::from_chars(text_.data(), text_.data() + text_.size(), parsed);
    TITAN_CHECK(error == std::errc() && end == text_.data() + text_.size(), "--{}: '{}' is not an integer", dotted_,
                text_);
    set(value, parsed);
  }
  void field(const char* key, double& value, const char*) override {
    if (key_ != key) return;
    valued_text();
    size_t used = 0;
    double parsed = 0;
    try {
      parsed = std::stod(text_, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TITAN_CHECK(used == text_.size() && !text_.empty(), "--{}: '{}' is not a number", dotted_, text_);
    set(value, parsed);
  }
  void field(const char* key, bool& value, const char*) override {
    if (key_ != key) return;
    if (text_ == kBareFlag) return set(value, true);
    TITAN_CHECK(text_ == "true" || text_ == "false" || text_ == "1" || text_ == "0",
                "--{}: '{}' is not a boolean (true or false)", dotted_, text_);
    set(value, text_ == "true" || text_ == "1");
  }
  void field(const char* key, std::vector<std::string>& value, const char*) override {
    if (key_ != key) return;
    std::vector<std::string> items;
    std::stringstream stream(valued_text());
    for (std::string item; std::getline(stream, item, ',');) {
      if (!item.empty()) items.push_back(item);
    }
    set(value, items);
  }

 private:
  const std::string& valued_text() const {
    TITAN_CHECK(text_ != kBareFlag, "--{} needs a value", dotted_);
    return text_;
  }
  template <typename T, typename U>
  void set(T& field, U value) {
    field = std::move(value);
    matched = true;
  }
  std::string key_, text_, dotted_;
};

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\u{:04X}", byte);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string format_double(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // keep TOML floats floats
  return text;
}

class TomlWriter : public ConfigVisitor {
 public:
  std::ostringstream out;
  void field(const char* key, std::string& value, const char*) override { out << key << " = " << quote(value) << "\n"; }
  void field(const char* key, int64_t& value, const char*) override { out << key << " = " << value << "\n"; }
  void field(const char* key, double& value, const char*) override {
    out << key << " = " << format_double(value) << "\n";
  }
  void field(const char* key, bool& value, const char*) override {
    out << key << " = " << (value ? "true" : "false") << "\n";
  }
  void field(const char* key, std::vector<std::string>& value, const char*) override {
    out << key << " = [";
    for (size_t i = 0; i < value.size(); ++i) out << (i ? ", " : "") << quote(value[i]);
    out << "]\n";
  }
};

class HelpWriter : public ConfigVisitor {
 public:
  explicit HelpWriter(std::string section) : section_(std::move(section)) {}
  std::ostringstream out;
  void field(const char* key, std::string& value, const char* help) override {
    line(key, "string", quote(value), help);
  }
  void field(const char* key, int64_t& value, const char* help) override {
    line(key, "int", std::to_string(value), help);
  }
  void field(const char* key, double& value, const char* help) override {
    line(key, "float", format_double(value), help);
  }
  void field(const char* key, bool& value, const char* help) override {
    line(key, "bool", value ? "true" : "false", help);
  }
  void field(const char* key, std::vector<std::string>& value, const char* help) override {
    line(key, "list", fmt::format("{}", fmt::join(value, ",")), help);
  }

 private:
  void line(const char* key, const char* type, const std::string& value, const char* help) {
    out << fmt::format("  --{}.{} {} (default {})\n      {}\n", section_, key, type, value, help);
  }
  std::string section_;
};

// A TorchTitan key found in a file, with its value as canonical text.
struct ForeignKey {
  const TorchTitanKey* entry;
  std::string value, where;
};

// A TOML value in the canonical text apply_torchtitan_key takes: true/false,
// numbers in decimal, strings as they are, a list's items joined by ",", a
// table as {key=value,...} (a TorchTitan key whose value is an object).
std::string canonical_text(const toml::node& node) {
  if (const auto* flag = node.as_boolean()) return flag->get() ? "true" : "false";
  if (const auto* integer = node.as_integer()) return std::to_string(integer->get());
  if (const auto* number = node.as_floating_point()) return fmt::format("{}", number->get());
  if (const auto* text = node.as_string()) return text->get();
  std::vector<std::string> items;
  if (const auto* table = node.as_table()) {
    for (const auto& [key, value] : *table) items.push_back(fmt::format("{}={}", key.str(), canonical_text(value)));
    return fmt::format("{{{}}}", fmt::join(items, ","));
  }
  if (const auto* array = node.as_array()) {
    for (const toml::node& item : *array) items.push_back(canonical_text(item));
  }
  return fmt::format("{}", fmt::join(items, ","));
}

// The TorchTitan keys under `dotted` (a key, or a sub-table such as
// [quantize.linear.float8] or [training.dataloader]); a key TorchTitan does
// not have either is unknown, as any other.
void collect_torchtitan_keys(const std::string& dotted, const toml::node& node, const std::string& source,
                             std::vector<ForeignKey>& foreign, std::vector<std::string>& unknown) {
  if (const toml::table* table = node.as_table(); table != nullptr && find_torchtitan_key(dotted) == nullptr) {
    for (const auto& [key, child] : *table) {
      collect_torchtitan_keys(fmt::format("{}.{}", dotted, key.str()), child, source, foreign, unknown);
    }
    return;
  }
  const TorchTitanKey* entry = find_torchtitan_key(dotted);
  if (entry == nullptr) {
    unknown.push_back(
        fmt::format("{}: unknown key {} (not one of titan's or TorchTitan's keys)", where(node, source), dotted));
    return;
  }
  foreign.push_back({entry, canonical_text(node), where(node, source)});
}

// Whether some field of the section is a dotted key under `prefix` ([quantize]'s linear.float8.*).
bool has_dotted_field(const std::vector<std::string>& fields, const std::string& prefix) {
  return std::any_of(fields.begin(), fields.end(), [&](const std::string& f) { return f.starts_with(prefix + "."); });
}

// The leaf keys under the nested `table` at `prefix` that are not fields, with their nodes.
std::vector<std::pair<std::string, const toml::node*>> unknown_nested_keys(const toml::table& table,
                                                                           const std::string& prefix,
                                                                           const std::vector<std::string>& fields) {
  std::vector<std::pair<std::string, const toml::node*>> unknown;
  for (const auto& [key, node] : table) {
    const std::string path = fmt::format("{}.{}", prefix, key.str());
    if (std::find(fields.begin(), fields.end(), path) != fields.end()) continue;
    if (node.is_table() && has_dotted_field(fields, path)) {
      const auto inner = unknown_nested_keys(*node.as_table(), path, fields);
      unknown.insert(unknown.end(), inner.begin(), inner.end());
    } else {
      unknown.emplace_back(path, &node);
    }
  }
  return unknown;
}

// What kind of key titan's section holds under `key`: a boolean, another value, or none.
class KeyKind : public ConfigVisitor {
 public:
  explicit KeyKind(std::string key) : key_(std::move(key)) {}
  bool found = false, boolean = false;
  void field(const char* key, std::string&, const char*) override { note(key, false); }
  void field(const char* key, int64_t&, const char*) override { note(key, false); }
  void field(const char* key, double&, const char*) override { note(key, false); }
  void field(const char* key, bool&, const char*) override { note(key, true); }
  void field(const char* key, std::vector<std::string>&, const char*) override { note(key, false); }

 private:
  void note(const char* key, bool is_boolean) {
    if (key_ != key) return;
    found = true;
    boolean = is_boolean;
  }
  std::string key_;
};

// Whether titan has the dotted key, and whether it is a boolean.
std::pair<bool, bool> titan_key_kind(JobConfig& config, const std::string& dotted) {
  const size_t dot = dotted.find('.');
  if (dot == std::string::npos) return {false, false};
  KeyKind kind(dotted.substr(dot + 1));
  config.for_each_section([&](const char* name, auto& section) {
    if (dotted.compare(0, dot, name) == 0 && dot == std::strlen(name)) section.visit(kind);
  });
  return {kind.found, kind.boolean};
}

bool is_known_key(JobConfig& config, const std::string& dotted) {
  return find_torchtitan_key(dotted) != nullptr || titan_key_kind(config, dotted).first;
}

bool is_boolean_key(JobConfig& config, const std::string& dotted) {
  if (const TorchTitanKey* entry = find_torchtitan_key(dotted)) {
    return entry->default_value == "true" || entry->default_value == "false";
  }
  return titan_key_kind(config, dotted).second;
}

// TorchTitan's subcommand choosing the activation-checkpointing policy: activation_checkpoint:full, ...
bool is_policy_subcommand(const std::string& arg) {
  return arg.starts_with("activation_checkpoint:") || arg.starts_with("activation-checkpoint:");
}

// The value of `flag` at args[i], written "--flag value" (i moves past it) or "--flag=value".
std::string flag_value(const std::vector<std::string>& args, size_t& i, const std::string& flag, const char* what) {
  if (args[i] != flag) return args[i].substr(flag.size() + 1);
  TITAN_CHECK(i + 1 < args.size(), "{} needs {}", flag, what);
  return args[++i];
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    // Levenshtein distance, one row at a time.
    std::vector<size_t> row(candidate.size() + 1);
    for (size_t j = 0; j <= candidate.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= candidate.size(); ++j) {
        const size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (word[i - 1] == candidate[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[candidate.size()] < best_distance) {
      best_distance = row[candidate.size()];
      best = candidate;
    }
  }
  return best;
}

void load_toml_string(JobConfig& config, const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    fail("{}:{}:{}: invalid TOML: {}", source, error.source().begin.line, error.source().begin.column,
         error.description());
  }
  // Every unknown section and key of the file is listed in one error, so a
  // config written for another tool needs one edit, not one rerun per key.
  // TorchTitan's keys that titan has no field for are collected apart
  // (train/torchtitan_keys.h) and applied once the file is known good.
  const std::vector<std::string> sections = section_names(config);
  std::vector<std::string> unknown;
  std::vector<ForeignKey> foreign;
  for (const auto& [name, node] : root) {
    const std::string section(name.str());
    if (std::find(sections.begin(), sections.end(), section) != sections.end()) {
      if (!node.is_table()) {
        unknown.push_back(fmt::format("{}: '{}' must be a [section] table", where(node, source), section));
      }
    } else if (is_torchtitan_section(section) || find_torchtitan_key(section) != nullptr) {
      // A TorchTitan section, or one of its top-level keys (dump_folder, hf_assets_path).
      collect_torchtitan_keys(section, node, source, foreign, unknown);
    } else {
      unknown.push_back(
          fmt::format("{}: unknown section [{}]{}", where(node, source), section, suggestion(section, sections)));
    }
  }
  config.for_each_section([&](const char* name, auto& section) {
    const toml::table* table = root[name].as_table();
    if (table == nullptr) return;
    KeyCollector keys;
    section.visit(keys);
    for (const auto& [key, node] : *table) {
      const std::string k(key.str());
      if (std::find(keys.keys.begin(), keys.keys.end(), k) != keys.keys.end()) continue;
      if (node.is_table() && has_dotted_field(keys.keys, k)) {
        // Named in full, as TorchTitan spells them: quantize.linear.float8.recipe_name.
        std::vector<std::string> dotted_fields;
        for (const std::string& field : keys.keys) dotted_fields.push_back(fmt::format("{}.{}", name, field));
        for (const auto& [path, leaf] : unknown_nested_keys(*node.as_table(), k, keys.keys)) {
          const std::string dotted = fmt::format("{}.{}", name, path);
          unknown.push_back(
              fmt::format("{}: unknown key {}{}", where(*leaf, source), dotted, suggestion(dotted, dotted_fields)));
        }
        continue;
      }
      const std::string dotted = fmt::format("{}.{}", name, k);
      if (find_torchtitan_key(dotted) != nullptr || is_torchtitan_section(dotted)) {
        collect_torchtitan_keys(dotted, node, source, foreign, unknown);
      } else {
        unknown.push_back(
            fmt::format("{}: unknown key [{}] {}{}", where(node, source), name, k, suggestion(k, keys.keys)));
      }
    }
  });
  if (unknown.size() == 1) fail("{}", unknown.front());
  TITAN_CHECK(unknown.empty(), "{}: {} unknown or misplaced items:\n  {}", source, unknown.size(),
              fmt::join(unknown, "\n  "));
  // TorchTitan's keys first: titan's own keys in the same file win over what they map to.
  for (const ForeignKey& key : foreign) apply_torchtitan_key(config, *key.entry, key.value, key.where);
  config.for_each_section([&](const char* name, auto& section) {
    const toml::table* table = root[name].as_table();
    if (table == nullptr) return;
    TomlReader reader(*table, name, source);
    section.visit(reader);
  });
}

void load_toml_file(JobConfig& config, const std::string& path) {
  // A folder opens as an empty stream on Linux: it would read as an empty config of defaults.
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  TITAN_CHECK(std::filesystem::exists(status), "cannot read config file '{}': no such file", path);
  TITAN_CHECK(std::filesystem::is_regular_file(status), "config file '{}' is a {}, not a file", path,
              std::filesystem::is_directory(status) ? "folder" : "special file");
  std::ifstream file(path);
  TITAN_CHECK(file.good(), "cannot read config file '{}'", path);
  std::stringstream text;
  text << file.rdbuf();
  load_toml_string(config, text.str(), path);
}

void apply_override(JobConfig& config, const std::string& flag, const std::string& given) {
  // TorchTitan's command line (tyro) also takes hyphens for underscores (--metrics.enable-tensorboard) and
  // --section.no-key for a boolean key set to false (--metrics.no-enable-wandb); no key has a hyphen.
  std::string dotted_key = flag;
  std::replace(dotted_key.begin(), dotted_key.end(), '-', '_');
  std::string value = given;
  const size_t last = dotted_key.rfind('.') + 1;  // 0 for a top-level key
  if (value == kBareFlag && dotted_key.compare(last, 3, "no_") == 0 && !is_known_key(config, dotted_key)) {
    const std::string positive = dotted_key.substr(0, last) + dotted_key.substr(last + 3);
    if (is_boolean_key(config, positive)) {
      dotted_key = positive;
      value = "false";
    }
  }
  if (const TorchTitanKey* entry = find_torchtitan_key(dotted_key)) {
    std::string text = value == kBareFlag ? "true" : value;
    const bool boolean = entry->default_value == "true" || entry->default_value == "false";
    if (boolean && (text == "1" || text == "0")) text = text == "1" ? "true" : "false";
    apply_torchtitan_key(config, *entry, text, "--" + dotted_key);
    return;
  }
  const size_t dot = dotted_key.find('.');
  TITAN_CHECK(dot != std::string::npos, "--{}: overrides look like --section.key value", dotted_key);
  const std::string section_name = dotted_key.substr(0, dot), key = dotted_key.substr(dot + 1);
  const std::vector<std::string> sections = section_names(config);
  TITAN_CHECK(std::find(sections.begin(), sections.end(), section_name) != sections.end(),
              "--{}: unknown section '{}'{}", dotted_key, section_name, suggestion(section_name, sections));
  bool matched = false;
  config.for_each_section([&](const char* name, auto& section) {
    if (section_name != name) return;
    OverrideSetter setter(key, value, dotted_key);
    section.visit(setter);
    if (!setter.matched) {
      KeyCollector keys;
      section.visit(keys);
      fail("--{}: unknown key '{}' in [{}]{}", dotted_key, key, name, suggestion(key, keys.keys));
    }
    matched = true;
  });
  TITAN_CHECK(matched, "--{}: not applied", dotted_key);
}

TrainArguments parse_train_arguments(const std::vector<std::string>& args) {
  TrainArguments result;
  std::string module;
  std::vector<std::pair<std::string, std::string>> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      result.help = true;
    } else if (arg == "--print-config") {
      result.print_config = true;
    } else if (arg == "--config" || arg.starts_with("--config=")) {
      result.config_path = flag_value(args, i, "--config", "a file (or, with --module, a registered config's name)");
    } else if (arg == "--module" || arg.starts_with("--module=")) {
      module = flag_value(args, i, "--module", "a name (`titan config list` shows them)");
    } else if (arg.starts_with("--")) {
      const size_t equals = arg.find('=');
      if (equals != std::string::npos) {
        overrides.emplace_back(arg.substr(2, equals - 2), arg.substr(equals + 1));
      } else if (i + 1 == args.size() || args[i + 1].starts_with("--") || is_policy_subcommand(args[i + 1])) {
        // A bare flag (--checkpoint.create_seed_checkpoint) sets a boolean key.
        overrides.emplace_back(arg.substr(2), kBareFlag);
      } else {
        overrides.emplace_back(arg.substr(2), args[++i]);
      }
    } else if (is_policy_subcommand(arg)) {
      // TorchTitan's subcommand choosing the activation-checkpointing policy.
      const std::string policy = arg.substr(arg.find(':') + 1);
      TITAN_CHECK(policy == "selective" || policy == "full" || policy == "memory-budget" || policy == "none",
                  "{}: TorchTitan's activation-checkpointing policies are selective, full, memory-budget and none",
                  arg);
      overrides.emplace_back("activation_checkpoint.mode", policy == "memory-budget" ? "memory_budget" : policy);
      // TorchTitan's selective policy is its per-op one.
      if (policy == "selective") overrides.emplace_back("activation_checkpoint.selective_ops", "true");
    } else {
      fail("unexpected argument '{}' (options look like --section.key value)", arg);
    }
  }
  // TorchTitan's --module NAME --config NAME: a registered config, by name.
  if (!module.empty()) {
    TITAN_CHECK(!result.config_path.empty(), "--module {} needs --config NAME (`titan config list` shows them)",
                module);
    result.config_path = registered_config(module, result.config_path).string();
  }
  if (!result.config_path.empty()) load_toml_file(result.config, result.config_path);
  for (const auto& [key, value] : overrides) apply_override(result.config, key, value);
  resolve_torchtitan_keys(result.config);
  ModelSection& model = result.config.model;
  if (model.hf_config.empty()) model.name = titan_family(model.name, model.flavor);
  return result;
}

namespace {

// The [lora] keys (checked whether or not LoRA is on, so a typo is caught early).
void validate_lora(const JobConfig& c) {
  const LoraSection& l = c.lora;
  TITAN_CHECK(l.rank > 0, "lora.rank must be > 0, got {}", l.rank);
  TITAN_CHECK(l.alpha > 0.0 && std::isfinite(l.alpha), "lora.alpha must be finite and > 0, got {}", l.alpha);
  TITAN_CHECK(l.dropout >= 0.0 && l.dropout < 1.0, "lora.dropout must be in [0, 1), got {}", l.dropout);
  TITAN_CHECK(!l.target_modules.empty(), "lora.target_modules is empty: name at least one projection");
  for (const std::string& target : l.target_modules) {
    TITAN_CHECK(nn::find_lora_target(target).has_value(),
                "lora.target_modules: '{}' is not one of q, k, v, o, gate, up, down (or q_proj, k_proj, v_proj, "
                "o_proj, gate_proj, up_proj, down_proj)",
                target);
  }
  if (!l.enable) return;
  // Recomputation would draw a second, different mask; a recorded step would replay one mask forever.
  TITAN_CHECK(l.dropout == 0.0 || c.activation_checkpoint.mode == "none",
              "lora.dropout {} with activation_checkpoint.mode = {}: recomputing a block would draw a different "
              "dropout mask (use lora.dropout = 0 or activation_checkpoint.mode = none)",
              l.dropout, c.activation_checkpoint.mode);
  TITAN_CHECK(l.dropout == 0.0 || !c.training.graph_capture,
              "lora.dropout {} with training.graph_capture: a recorded step would replay one dropout mask", l.dropout);
  TITAN_CHECK(c.parallelism.pipeline_parallel_degree == 1,
              "lora.enable with parallelism.pipeline_parallel_degree {}: LoRA does not run under pipeline "
              "parallelism yet",
              c.parallelism.pipeline_parallel_degree);
}

// model.converters and the [quantize] tables they read (models/float8_plan.h).
void validate_quantize(const JobConfig& c) {
  const QuantizeSection& q = c.quantize;
  const std::vector<std::string>& converters = c.model.converters;
  const auto named = [&](const char* name) {
    return std::find(converters.begin(), converters.end(), name) != converters.end();
  };
  for (const std::string& converter : converters) {
    TITAN_CHECK(converter == "quantize.linear.float8" || converter == "quantize.linear.mx" ||
                    converter == "quantize.grouped_mm.float8" || converter == "quantize.grouped_mm.mx",
                "model.converters: unknown converter '{}' (expected quantize.linear.float8, quantize.linear.mx, "
                "quantize.grouped_mm.float8 or quantize.grouped_mm.mx)",
                converter);
    TITAN_CHECK(std::count(converters.begin(), converters.end(), converter) == 1, "model.converters names {} twice",
                converter);
  }
  TITAN_CHECK(!(named("quantize.grouped_mm.float8") && named("quantize.grouped_mm.mx")),
              "model.converters names both quantize.grouped_mm.float8 and quantize.grouped_mm.mx: MoE experts take one "
              "recipe");
  TITAN_CHECK(!named("quantize.grouped_mm.mx") || q.grouped_mx_recipe_name == "mxfp8",
              "quantize.grouped_mm.mx.recipe_name: unknown recipe '{}' (expected mxfp8)", q.grouped_mx_recipe_name);
  TITAN_CHECK(!(named("quantize.linear.float8") && named("quantize.linear.mx")),
              "model.converters names both quantize.linear.float8 and quantize.linear.mx: a Linear takes one recipe");
  const auto& float8_names = nn::float8_linear_recipe_names();
  TITAN_CHECK(q.float8_recipe_name.empty() ||
                  std::find(float8_names.begin(), float8_names.end(), q.float8_recipe_name) != float8_names.end(),
              "quantize.linear.float8.recipe_name: unknown recipe '{}' (expected {})", q.float8_recipe_name,
              fmt::join(float8_names, ", "));
  const auto& mx_names = nn::mx_linear_recipe_names();
  TITAN_CHECK(std::find(mx_names.begin(), mx_names.end(), q.mx_recipe_name) != mx_names.end(),
              "quantize.linear.mx.recipe_name: unknown recipe '{}' (expected {})", q.mx_recipe_name,
              fmt::join(mx_names, ", "));
  const std::string& kernel = q.mx_dim1_cast_kernel_choice;
  TITAN_CHECK(kernel == "triton" || kernel == "cuda" || kernel == "torch",
              "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice must be triton, cuda or torch, got '{}'", kernel);
  // TorchTitan asserts the same when the converter runs: the all-gather belongs to the default (tensorwise) config.
  TITAN_CHECK(!named("quantize.linear.float8") || !q.float8_fsdp_all_gather || q.float8_recipe_name.empty(),
              "quantize.linear.float8.enable_fsdp_float8_all_gather with recipe_name '{}': TorchTitan allows the "
              "float8 all-gather only without a recipe name (tensorwise)",
              q.float8_recipe_name);
  // FLUX's GEMMs reduce over a batch's image and text tokens or, in the modulations, its examples:
  // F::float8_linear names a layer whose count 32 does not divide.
  if (named("quantize.linear.mx") && c.model.name != "flux") {
    const int64_t cp = std::max<int64_t>(1, c.parallelism.context_parallel_degree);
    const int64_t tokens = c.training.local_batch_size * c.training.seq_len / cp;
    TITAN_CHECK(tokens % ops::kMxBlockSize == 0,
                "quantize.linear.mx: the weight gradient's GEMM reduces over the {} tokens of a batch "
                "(training.local_batch_size x training.seq_len / context_parallel_degree), which MXFP8's blocks "
                "of {} do not divide",
                tokens, ops::kMxBlockSize);
  }
}

// The checkpoint keys that only make sense together (TorchTitan's meanings).
void validate_checkpoint_keys(const CheckpointSection& c, bool initial_load_in_hf) {
  const std::string& dtype = c.export_dtype;
  TITAN_CHECK(dtype == "f32" || dtype == "bf16" || dtype == "f16" || dtype == "float32" || dtype == "bfloat16" ||
                  dtype == "float16",
              "checkpoint.export_dtype must be float32, bfloat16 or float16 (or f32, bf16, f16), got '{}'", dtype);
  TITAN_CHECK(!c.last_save_in_hf || c.last_save_model_only,
              "checkpoint.last_save_in_hf = true needs checkpoint.last_save_model_only = true: a Hugging Face folder "
              "holds model weights only, not the training state");
  TITAN_CHECK(!initial_load_in_hf || c.initial_load_model_only,
              "checkpoint.initial_load_in_hf = true needs checkpoint.initial_load_model_only = true: a Hugging Face "
              "folder holds model weights only, not the training state");
  TITAN_CHECK(!(c.load_only && c.create_seed_checkpoint),
              "checkpoint.load_only = true saves nothing, so checkpoint.create_seed_checkpoint cannot write the seed "
              "checkpoint: set one of them to false");
}

// The [fault_tolerance] keys: one replica group of a fault-tolerant job (docs/fault-tolerance.md).
void validate_fault_tolerance(const JobConfig& c) {
  const FaultToleranceSection& f = c.fault_tolerance;
  TITAN_CHECK(f.semi_sync_method.empty(),
              "fault_tolerance.semi_sync_method = '{}': semi-synchronous training (local_sgd, diloco) is not built; "
              "leave it empty (every step averages gradients across replica groups)",
              f.semi_sync_method);
  if (!f.enable) return;
  TITAN_CHECK(f.process_group == "gloo",
              "fault_tolerance.process_group = '{}': only gloo is built (NCCL groups cannot be rebuilt here)",
              f.process_group);
  TITAN_CHECK(f.process_group_timeout_ms > 0, "fault_tolerance.process_group_timeout_ms must be > 0, got {}",
              f.process_group_timeout_ms);
  TITAN_CHECK(f.group_size >= 1, "fault_tolerance.group_size (the number of replica groups) must be >= 1, got {}",
              f.group_size);
  TITAN_CHECK(f.replica_id >= 0 && f.replica_id < f.group_size,
              "fault_tolerance.replica_id {} is not one of the {} replica groups (0 to {})", f.replica_id, f.group_size,
              f.group_size - 1);
  TITAN_CHECK(f.min_replica_size >= 1 && f.min_replica_size <= f.group_size,
              "fault_tolerance.min_replica_size must be in 1..group_size = {}, got {}", f.group_size,
              f.min_replica_size);
  TITAN_CHECK(!c.training.graph_capture,
              "fault_tolerance.enable with training.graph_capture: a recorded step cannot stop for the cross-group "
              "all-reduce; turn one of them off");
  TITAN_CHECK(c.comm.mode == "default", "fault_tolerance.enable with comm.mode = {}: a rehearsal has no peers",
              c.comm.mode);
}

}  // namespace

std::optional<data::ChatOptions> chat_options(const JobConfig& config) {
  // Parsed whether or not chat is on, so a typo is caught early.
  data::ChatOptions options;
  options.chat_template = config.chat.template_name;
  options.train_on = data::parse_chat_train_on(config.chat.train_on, "chat.train_on");
  options.overlong = data::parse_chat_overlong(config.chat.overlong, "chat.overlong");
  if (!config.chat.enable) return std::nullopt;
  return options;
}

void validate(const JobConfig& c) {
  auto positive = [](int64_t value, const char* key) { TITAN_CHECK(value > 0, "{} must be > 0, got {}", key, value); };
  positive(c.training.local_batch_size, "training.local_batch_size");
  positive(c.training.seq_len, "training.seq_len");
  positive(c.training.steps, "training.steps");
  positive(c.metrics.log_freq, "metrics.log_freq");
  positive(c.profiling.profile_freq, "profiling.profile_freq");
  // A recorded step holds its optimizer update: it cannot be withheld after the fact.
  TITAN_CHECK(!c.training.skip_nonfinite_steps || !c.training.graph_capture,
              "training.skip_nonfinite_steps with training.graph_capture: a recorded step applies its update before "
              "the loss can be checked; turn one of them off");
  TITAN_CHECK(c.comm.trace_buf_size >= 0, "comm.trace_buf_size must be >= 0 (0 turns the flight recorder off), got {}",
              c.comm.trace_buf_size);
  // Beyond 2^31 tokens a micro-batch's tensors alone would take 64 GiB per int64 field: a typo, not a job.
  TITAN_CHECK(c.training.seq_len <= (int64_t{1} << 31) / c.training.local_batch_size,
              "training.local_batch_size x training.seq_len = {} x {} tokens per micro-batch is more than 2^31",
              c.training.local_batch_size, c.training.seq_len);
  TITAN_CHECK(c.model.loss_vocab_chunk >= 0, "model.loss_vocab_chunk must be >= 0 (0: chosen by the loss), got {}",
              c.model.loss_vocab_chunk);
  TITAN_CHECK(c.training.global_batch_size == -1 || c.training.global_batch_size > 0,
              "training.global_batch_size must be > 0 (or -1: local batch x data-parallel ranks), got {}",
              c.training.global_batch_size);
  TITAN_CHECK(std::isfinite(c.comm.timeout_seconds) && c.comm.timeout_seconds > 0.0,
              "comm.timeout_seconds must be finite and > 0, got {}", c.comm.timeout_seconds);
  TITAN_CHECK(c.comm.mode == "default" || c.comm.mode == "fake_backend",
              "comm.mode must be default or fake_backend, got '{}'", c.comm.mode);
  if (c.comm.mode == "fake_backend") {
    TITAN_CHECK(c.comm.fake_world_size >= 1 && c.comm.fake_world_size <= (int64_t{1} << 24),
                "comm.mode = fake_backend needs comm.fake_world_size, the ranks of the job to rehearse (1 to 2^24), "
                "got {}",
                c.comm.fake_world_size);
    TITAN_CHECK(c.comm.fake_rank >= 0 && c.comm.fake_rank < c.comm.fake_world_size,
                "comm.fake_rank {} is not a rank of the {} the fake backend plays (0 to {})", c.comm.fake_rank,
                c.comm.fake_world_size, c.comm.fake_world_size - 1);
  }
  TITAN_CHECK(std::isfinite(c.metrics.peak_tflops) && c.metrics.peak_tflops >= 0.0,
              "metrics.peak_tflops must be finite and >= 0 (0: the device's known peak), got {}",
              c.metrics.peak_tflops);
  TITAN_CHECK(c.model.vocab_size >= 0, "model.vocab_size must be >= 0 (0: the tokenizer's), got {}",
              c.model.vocab_size);
  TITAN_CHECK(c.lr_scheduler.warmup_steps >= 0, "lr_scheduler.warmup_steps must be >= 0");
  TITAN_CHECK(c.lr_scheduler.total_steps >= 0, "lr_scheduler.total_steps must be >= 0 (0: training.steps), got {}",
              c.lr_scheduler.total_steps);
  TITAN_CHECK(c.lr_scheduler.decay_ratio <= 1.0,
              "lr_scheduler.decay_ratio must be <= 1 (< 0: every step after warmup), got {}",
              c.lr_scheduler.decay_ratio);
  TITAN_CHECK(c.lr_scheduler.min_lr_factor >= 0.0 && c.lr_scheduler.min_lr_factor <= 1.0,
              "lr_scheduler.min_lr_factor must be in [0, 1]");
  const std::vector<std::string> decays{"linear", "sqrt", "cosine"};
  TITAN_CHECK(std::find(decays.begin(), decays.end(), c.lr_scheduler.decay_type) != decays.end(),
              "lr_scheduler.decay_type '{}' is not one of linear, sqrt, cosine{}", c.lr_scheduler.decay_type,
              suggestion(c.lr_scheduler.decay_type, decays));
  TITAN_CHECK(c.optimizer.name == "AdamW", "optimizer.name '{}': only AdamW is implemented", c.optimizer.name);
  TITAN_CHECK(c.optimizer.lr > 0.0 && std::isfinite(c.optimizer.lr), "optimizer.lr must be finite and > 0, got {}",
              c.optimizer.lr);
  TITAN_CHECK(c.optimizer.beta1 >= 0.0 && c.optimizer.beta1 < 1.0, "optimizer.beta1 must be in [0, 1), got {}",
              c.optimizer.beta1);
  TITAN_CHECK(c.optimizer.beta2 >= 0.0 && c.optimizer.beta2 < 1.0, "optimizer.beta2 must be in [0, 1), got {}",
              c.optimizer.beta2);
  TITAN_CHECK(c.optimizer.eps >= 0.0 && std::isfinite(c.optimizer.eps), "optimizer.eps must be finite and >= 0, got {}",
              c.optimizer.eps);
  TITAN_CHECK(c.optimizer.weight_decay >= 0.0 && std::isfinite(c.optimizer.weight_decay),
              "optimizer.weight_decay must be finite and >= 0, got {}", c.optimizer.weight_decay);
  TITAN_CHECK(!std::isnan(c.training.max_norm), "training.max_norm must be a number (<= 0: no clipping), got nan");
  TITAN_CHECK(c.optimizer.state_dtype == "f32" || c.optimizer.state_dtype == "bf16",
              "optimizer.state_dtype must be f32 or bf16, got '{}'", c.optimizer.state_dtype);
  TITAN_CHECK(c.training.mixed_precision_param == "f32" || c.training.mixed_precision_param == "bf16",
              "training.mixed_precision_param must be f32 or bf16, got '{}'", c.training.mixed_precision_param);
  TITAN_CHECK(c.training.mixed_precision_reduce == "f32", "training.mixed_precision_reduce must be f32, got '{}'",
              c.training.mixed_precision_reduce);
  if (c.training.graph_capture) {
    TITAN_CHECK(c.training.device.rfind("cuda", 0) == 0,
                "training.graph_capture needs training.device = cuda (got '{}'): only CUDA records steps",
                c.training.device);
    TITAN_CHECK(c.model.fused_loss,
                "training.graph_capture needs model.fused_loss = true: the plain loss reads its token count on the "
                "host");
    TITAN_CHECK(c.activation_checkpoint.mode != "offload",
                "training.graph_capture with activation_checkpoint.mode = offload is not supported: offload waits on "
                "its copies from the host");
  }
  const std::vector<std::string> modes{"none", "full", "selective", "offload", "memory_budget"};
  TITAN_CHECK(std::find(modes.begin(), modes.end(), c.activation_checkpoint.mode) != modes.end(),
              "activation_checkpoint.mode '{}' is not one of none, full, selective, offload, memory_budget{}",
              c.activation_checkpoint.mode, suggestion(c.activation_checkpoint.mode, modes));
  TITAN_CHECK(c.activation_checkpoint.memory_budget >= 0.0 && c.activation_checkpoint.memory_budget <= 1.0,
              "activation_checkpoint.memory_budget must be between 0 (recompute as much as full checkpointing) and 1 "
              "(keep every activation), got {}",
              c.activation_checkpoint.memory_budget);
  positive(c.activation_checkpoint.selective_every, "activation_checkpoint.selective_every");
  TITAN_CHECK(c.model.attention == "flash" || c.model.attention == "naive",
              "model.attention must be flash or naive, got '{}'", c.model.attention);
  TITAN_CHECK(c.model.moe_expert_impl == "grouped" || c.model.moe_expert_impl == "loop",
              "model.moe_expert_impl must be grouped or loop, got '{}'", c.model.moe_expert_impl);
  TITAN_CHECK(std::isfinite(c.model.moe_aux_loss_coef), "model.moe_aux_loss_coef must be a number");
  TITAN_CHECK(std::isfinite(c.model.moe_load_balance_coeff), "model.moe_load_balance_coeff must be a number");
  TITAN_CHECK(!c.training.graph_capture || c.model.moe_expert_impl == "grouped",
              "training.graph_capture with model.moe_expert_impl = loop: the loop reads each expert's token count "
              "on the host, which a recorded step cannot");
  TITAN_CHECK(c.checkpoint.async_mode == "disabled" || c.checkpoint.async_mode == "async",
              "checkpoint.async_mode must be disabled or async, got '{}'", c.checkpoint.async_mode);
  const std::vector<std::string> parts{"model", "optimizer", "lr_scheduler", "dataloader", "train_state"};
  for (const std::string& part : c.checkpoint.exclude_from_loading) {
    TITAN_CHECK(std::find(parts.begin(), parts.end(), part) != parts.end(),
                "checkpoint.exclude_from_loading: '{}' is not one of model, optimizer, lr_scheduler, dataloader, "
                "train_state{}",
                part, suggestion(part, parts));
  }
  positive(c.checkpoint.interval, "checkpoint.interval");
  TITAN_CHECK(c.checkpoint.keep_latest_k >= 0,
              "checkpoint.keep_latest_k must be >= 0 (0 keeps every checkpoint), got {}", c.checkpoint.keep_latest_k);
  TITAN_CHECK(c.checkpoint.load_step >= -1, "checkpoint.load_step must be >= 0 (or -1: the newest), got {}",
              c.checkpoint.load_step);
  TITAN_CHECK(c.checkpoint.local_interval >= 0, "checkpoint.local_interval must be >= 0 (0 = no fast tier), got {}",
              c.checkpoint.local_interval);
  TITAN_CHECK(c.checkpoint.local_keep_latest_k >= 1,
              "checkpoint.local_keep_latest_k must be >= 1 (the fast tier keeps at least its newest step), got {}",
              c.checkpoint.local_keep_latest_k);
  TITAN_CHECK(c.checkpoint.local_interval == 0 || c.checkpoint.enable,
              "checkpoint.local_interval = {} needs checkpoint.enable = true (the fast tier is part of checkpointing)",
              c.checkpoint.local_interval);
  TITAN_CHECK(c.checkpoint.local_folder.empty() || c.checkpoint.local_folder != c.job.dump_folder,
              "checkpoint.local_folder must not be the dump folder ('{}')", c.checkpoint.local_folder);
  validate_checkpoint_keys(c.checkpoint, c.torchtitan.initial_load_in_hf);
  const ParallelismSection& p = c.parallelism;
  positive(p.pipeline_parallel_microbatch_size, "parallelism.pipeline_parallel_microbatch_size");
  TITAN_CHECK(p.pipeline_parallel_first_stage_less_layers >= 0 && p.pipeline_parallel_last_stage_less_layers >= 0,
              "parallelism.pipeline_parallel_first_stage_less_layers and last_stage_less_layers must be >= 0");
  TITAN_CHECK(p.pipeline_parallel_layers_per_stage == -1 || p.pipeline_parallel_layers_per_stage > 0,
              "parallelism.pipeline_parallel_layers_per_stage must be > 0 (or -1: from the schedule), got {}",
              p.pipeline_parallel_layers_per_stage);
  if (p.pipeline_parallel_degree > 1) {
    TITAN_CHECK(c.training.local_batch_size % p.pipeline_parallel_microbatch_size == 0,
                "training.local_batch_size {} is not a multiple of parallelism.pipeline_parallel_microbatch_size {} "
                "(each pipeline step cuts the local batch into micro-batches)",
                c.training.local_batch_size, p.pipeline_parallel_microbatch_size);
    TITAN_CHECK(!c.training.graph_capture,
                "training.graph_capture with parallelism.pipeline_parallel_degree {}: a recorded step cannot wait for "
                "another stage from the host",
                p.pipeline_parallel_degree);
  }
  parallel::parse_rotate_method(p.context_parallel_rotate_method);
  parallel::parse_load_balancer(p.context_parallel_load_balancer);
  if (p.context_parallel_degree > 1) {
    TITAN_CHECK(c.training.seq_len % (2 * p.context_parallel_degree) == 0,
                "training.seq_len {} is not a multiple of 2 x parallelism.context_parallel_degree = {} (context "
                "parallelism cuts each sequence into 2 x cp equal chunks)",
                c.training.seq_len, 2 * p.context_parallel_degree);
    TITAN_CHECK(c.model.attention == "flash",
                "model.attention = \"{}\" with parallelism.context_parallel_degree {}: ring attention computes with "
                "flash attention's kernels (set model.attention = \"flash\")",
                c.model.attention, p.context_parallel_degree);
  }
  TITAN_CHECK(c.validation.split >= 0.0 && c.validation.split < 1.0, "validation.split must be in [0, 1)");
  TITAN_CHECK(c.validation.dataset_path.empty() || c.model.name == "flux",
              "validation.dataset_path {} is read by flux jobs only; a language model validates on the "
              "validation.split of training.dataset_path",
              c.validation.dataset_path);
  if (c.validation.enable) {
    positive(c.validation.freq, "validation.freq");
    positive(c.validation.steps, "validation.steps");
  }
  chat_options(c);
  validate_lora(c);
  validate_quantize(c);
  validate_fault_tolerance(c);
}

std::string config_help() {
  JobConfig defaults;
  std::ostringstream out;
  out << "titan train --config FILE [--section.key value ...] [--print-config]\n\nConfig keys (TOML [section] key, or "
         "--section.key on the command line):\n";
  defaults.for_each_section([&](const char* name, auto& section) {
    HelpWriter writer(name);
    section.visit(writer);
    out << "\n[" << name << "]\n" << writer.out.str();
  });
  return out.str();
}

std::string config_to_toml(JobConfig& config) {
  std::ostringstream out;
  bool first = true;
  config.for_each_section([&](const char* name, auto& section) {
    TomlWriter writer;
    section.visit(writer);
    out << (first ? "" : "\n") << "[" << name << "]\n" << writer.out.str();
    first = false;
  });
  return out.str();
}

}  // namespace titan::train
