// Reading and writing JobConfig: TOML files, --section.key overrides, help
// and dump text. Errors name the file, line, section and key, and suggest the
// closest known key for a misspelt one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "titan/data/chat_options.h"
#include "titan/train/job_config.h"

namespace titan::train {

// Fills `config` from a TOML file; unknown sections or keys and wrong value
// types are titan::Errors naming file, line and key.
void load_toml_file(JobConfig& config, const std::string& path);
void load_toml_string(JobConfig& config, const std::string& text, const std::string& source);

// Sets "section.key" from its command-line text ("8", "3e-4", "true", "a,b").
void apply_override(JobConfig& config, const std::string& dotted_key, const std::string& value);

// Parses titan train's arguments: --config FILE, --section.key VALUE (or
// --section.key=VALUE), --help, --print-config. The config file is read
// first, then overrides apply in order.
struct TrainArguments {
  JobConfig config;
  bool help = false;
  bool print_config = false;
  std::string config_path;
};
TrainArguments parse_train_arguments(const std::vector<std::string>& args);

// Semantic checks across keys (positive sizes, known names); throws titan::Error.
void validate(const JobConfig& config);

// The [chat] section, parsed (errors name the key): nullopt when chat.enable
// is off. validate() calls it, so a validated config parses.
std::optional<data::ChatOptions> chat_options(const JobConfig& config);

std::string config_help();
std::string config_to_toml(JobConfig& config);

// The candidate closest to `word` by edit distance, or "" when none is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace titan::train
