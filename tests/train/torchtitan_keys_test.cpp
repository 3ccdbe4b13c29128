// TorchTitan's job-config keys in titan (train/torchtitan_keys.h): the docs
// table equals the parser; TorchTitan's five stock TOMLs of its last TOML
// release load (tests/train/torchtitan_configs, written from their keys and
// values); keys with no effect add a notice, refused ones name the key, and
// mapped ones set titan's key, from a file and from the command line; and
// the registry behind --module NAME --config NAME.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "titan/train/config_loader.h"
#include "titan/train/config_registry.h"
#include "titan/train/config_visitor.h"
#include "titan/train/job_model_config.h"
#include "titan/train/torchtitan_keys.h"

namespace titan {
namespace {

using testing::expect_error;

// Every key of titan's config, dotted.
class DottedKeys : public train::ConfigVisitor {
 public:
  explicit DottedKeys(std::vector<std::string>& out) : out_(out) {}
  std::string section;
  void field(const char* key, std::string&, const char*) override { add(key); }
  void field(const char* key, int64_t&, const char*) override { add(key); }
  void field(const char* key, double&, const char*) override { add(key); }
  void field(const char* key, bool&, const char*) override { add(key); }
  void field(const char* key, std::vector<std::string>&, const char*) override { add(key); }

 private:
  void add(const char* key) { out_.push_back(section + "." + key); }
  std::vector<std::string>& out_;
};

std::vector<std::string> titan_keys() {
  std::vector<std::string> keys;
  train::JobConfig config;
  DottedKeys visitor(keys);
  config.for_each_section([&](const char* name, auto& section) {
    visitor.section = name;
    section.visit(visitor);
  });
  return keys;
}

const char* use_name(train::TorchTitanKeyUse use) {
  switch (use) {
    case train::TorchTitanKeyUse::mapped:
      return "mapped";
    case train::TorchTitanKeyUse::no_effect:
      return "no effect";
    case train::TorchTitanKeyUse::refused:
      return "refused";
    case train::TorchTitanKeyUse::converter_setting:
      return "inert";
  }
  return "?";
}

struct Row {
  std::string status, note;
};

// docs/torchtitan-keys.md's rows: | `key` | status | note |.
std::map<std::string, Row> documented_rows(size_t* count) {
  std::ifstream in(std::string(TITAN_SOURCE_DIR) + "/docs/torchtitan-keys.md");
  std::map<std::string, Row> rows;
  *count = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("| `")) continue;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) {
      const size_t begin = cell.find_first_not_of(' '), end = cell.find_last_not_of(' ');
      cells.push_back(begin == std::string::npos ? "" : cell.substr(begin, end - begin + 1));
    }
    if (cells.size() < 3) continue;
    ++*count;
    rows[cells[0].substr(1, cells[0].size() - 2)] = {cells[1], cells[2]};
  }
  return rows;
}

TEST(TorchTitanKeys, TheDocsTableIsTheParser) {
  size_t count = 0;
  const std::map<std::string, Row> rows = documented_rows(&count);
  // TorchTitan v0.2.2's job_config.py defines 149 keys (its last TOML release), each listed once.
  EXPECT_EQ(count, 149u);
  EXPECT_EQ(rows.size(), 149u);
  const std::vector<std::string> ours = titan_keys();
  for (const auto& [key, row] : rows) {
    const train::TorchTitanKey* entry = train::find_torchtitan_key(key);
    const bool titan_has = std::find(ours.begin(), ours.end(), key) != ours.end();
    if (row.status == "titan") {
      EXPECT_TRUE(titan_has) << key << " is documented as titan's key, but titan has no such key";
      EXPECT_EQ(entry, nullptr) << key << " is both titan's key and a TorchTitan-only entry";
    } else {
      ASSERT_NE(entry, nullptr) << key << " is documented as '" << row.status << "' but the parser has no entry";
      EXPECT_EQ(row.status, use_name(entry->use)) << key;
      EXPECT_EQ(row.note, entry->why) << key;
      EXPECT_FALSE(titan_has) << key;
    }
  }
  for (const train::TorchTitanKey& entry : train::torchtitan_keys()) {
    EXPECT_TRUE(rows.contains(entry.key)) << entry.key << " is in the parser but not in docs/torchtitan-keys.md";
  }
}

std::string fixture(const std::string& name) {
  return std::string(TITAN_SOURCE_DIR) + "/tests/train/torchtitan_configs/" + name;
}

train::JobConfig load(const std::string& name) {
  return train::parse_train_arguments({"--config", fixture(name), "--training.dataset_path", "data",
                                       "--model.tokenizer_path", "data/tokenizer.json"})
      .config;
}

bool has_notice(const train::JobConfig& config, const std::string& text) {
  return std::any_of(config.notices.begin(), config.notices.end(),
                     [&](const std::string& notice) { return notice.find(text) != std::string::npos; });
}

// The five TOMLs load and validate with only the data and tokenizer paths
// overridden; their TorchTitan-only keys map or add notices. deepseek_v3 has
// no model in titan yet: its config loads, and building its model is refused
// naming the families there are.
TEST(TorchTitanKeys, FiveStockConfigsLoadAsTheyAre) {
  const train::JobConfig llama = load("llama3_debug_model.toml");
  EXPECT_NO_THROW(train::validate(llama));
  EXPECT_EQ(llama.activation_checkpoint.mode, "selective");
  EXPECT_EQ(llama.activation_checkpoint.selective_every, 2);  // selective_ac_option = '2'
  EXPECT_EQ(llama.model.tokenizer_path, "data/tokenizer.json");
  EXPECT_DOUBLE_EQ(llama.lr_scheduler.decay_ratio, 0.8);
  EXPECT_TRUE(has_notice(llama, "checkpoint.last_save_model_only"));

  for (const char* name : {"llama3_8b.toml", "qwen3_0.6b.toml"}) {
    const train::JobConfig config = load(name);
    EXPECT_NO_THROW(train::validate(config)) << name;
    // selective_ac_option = "op" asks for per-op recomputation: every activation is kept, and the job says so.
    EXPECT_EQ(config.activation_checkpoint.mode, "none") << name;
    EXPECT_TRUE(has_notice(config, "selective_ac_option = \"op\"")) << name;
  }
  const train::JobConfig moe = load("qwen3_moe_debug.toml");
  EXPECT_NO_THROW(train::validate(moe));
  EXPECT_EQ(moe.model.name, "qwen3_moe");  // TorchTitan's qwen3 + debugmodel_moe
  EXPECT_EQ(moe.model.flavor, "debugmodel_moe");

  const train::JobConfig deepseek = load("deepseek_v3_debug_model.toml");
  EXPECT_NO_THROW(train::validate(deepseek));
  // The job stops at its model, naming the families titan has.
  expect_error(
      [&] {
        train::JobConfig job = deepseek;
        train::resolve_model_config(job, 0);
      },
      {"unknown model 'deepseek_v3'", "llama3", "qwen3_moe"});
}

train::JobConfig from_toml(const std::string& text) {
  train::JobConfig config;
  train::load_toml_string(config, text, "job.toml");
  train::resolve_torchtitan_keys(config);
  return config;
}

TEST(TorchTitanKeys, NoticesRefusalsAndMappings) {
  // TorchTitan's defaults ask for nothing: silent.
  EXPECT_TRUE(from_toml("[compile]\nenable = false\ncomponents = [\"model\", \"loss\"]\n").notices.empty());
  // Something titan does not do: one note naming the key and why.
  const train::JobConfig compiled = from_toml("[compile]\nenable = true\n[training.dataloader]\nnum_workers = 4\n");
  ASSERT_EQ(compiled.notices.size(), 2u);
  EXPECT_TRUE(has_notice(compiled, "compile.enable = \"true\" has no effect here"));
  EXPECT_TRUE(has_notice(compiled, "training.dataloader.num_workers = \"4\""));
  // Something that would change the result: an error naming the line and the key.
  expect_error([] { from_toml("[job]\ndescription = \"x\"\n\n[metrics]\nenable_wandb = true\n"); },
               {"job.toml:5", "metrics.enable_wandb", "enable_tensorboard"});
  expect_error([] { from_toml("[model]\nconverters = [\"quantize.linear.float8\"]\n"); },
               {"job.toml:2", "model.converters", "not built"});
  // Recipe settings are read only by a converter: accepted whatever they hold.
  EXPECT_TRUE(
      from_toml("[quantize.linear.float8]\nrecipe_name = \"rowwise\"\nfilter_fqns = [\"output\"]\n").notices.empty());
  // Mapped onto titan's keys.
  const train::JobConfig mapped = from_toml(
      "[debug]\nseed = 7\ndeterministic = true\n[comm]\ntrain_timeout_seconds = 30\n"
      "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"3\"\n"
      "[model]\nhf_assets_path = \"assets/llama\"\n[checkpoint]\ninitial_load_in_hf = true\n"
      "[training]\nmixed_precision_param = \"bfloat16\"\n");
  EXPECT_EQ(mapped.training.seed, 7);
  EXPECT_TRUE(mapped.training.deterministic);
  EXPECT_DOUBLE_EQ(mapped.comm.timeout_seconds, 30.0);
  EXPECT_EQ(mapped.activation_checkpoint.selective_every, 3);
  EXPECT_EQ(mapped.model.tokenizer_path, "assets/llama/tokenizer.json");
  EXPECT_EQ(mapped.checkpoint.initial_load_path, "assets/llama");
  EXPECT_EQ(mapped.training.mixed_precision_param, "bf16");
  // A key neither titan nor TorchTitan has stays an error, inside a TorchTitan section too.
  expect_error([] { from_toml("[compile]\nenabel = true\n"); }, {"job.toml:2", "compile.enabel"});
  expect_error([] { from_toml("[compiler]\nenable = true\n"); }, {"unknown section [compiler]"});
}

TEST(TorchTitanKeys, TheCommandLineTakesThemToo) {
  const train::TrainArguments args =
      train::parse_train_arguments({"--compile.enable", "true", "--debug.seed", "11", "--metrics.enable_wandb", "0"});
  EXPECT_TRUE(has_notice(args.config, "compile.enable"));
  EXPECT_EQ(args.config.training.seed, 11);
  expect_error(
      [] {
        train::parse_train_arguments({"--fault_tolerance.enable", "true"});
      },
      {"--fault_tolerance.enable", "torchft"});
  expect_error([] { train::parse_train_arguments({"--compile.enabel", "true"}); }, {"compile.enabel"});
}

// TorchTitan's current way of choosing a config: --module NAME --config
// NAME picks share/titan/configs/NAME/NAME.toml; every registered config
// validates, and a name that is not registered is an error naming those that are.
TEST(ConfigRegistry, ModuleAndConfigPickARegisteredConfig) {
  const std::vector<train::RegisteredConfig> configs = train::registered_configs();
  bool debugmodel = false;
  for (const train::RegisteredConfig& config : configs) {
    debugmodel = debugmodel || (config.module == "llama3" && config.name == "llama3_debugmodel");
    const train::JobConfig loaded =
        train::parse_train_arguments({"--module", config.module, "--config", config.name}).config;
    EXPECT_NO_THROW(train::validate(loaded)) << config.module << "/" << config.name;
  }
  EXPECT_TRUE(debugmodel);
  const train::JobConfig llama =
      train::parse_train_arguments({"--module", "llama3", "--config", "llama3_debugmodel", "--training.steps", "3"})
          .config;
  EXPECT_EQ(llama.model.flavor, "debugmodel");
  EXPECT_EQ(llama.training.seq_len, 2048);
  EXPECT_EQ(llama.training.steps, 3);  // overrides still apply
  EXPECT_DOUBLE_EQ(llama.lr_scheduler.decay_ratio, 0.8);
  // titan's own example configs are module "titan".
  EXPECT_EQ(train::parse_train_arguments({"--module", "titan", "--config", "llama3_debug"}).config.model.flavor,
            "debugmodel");
  expect_error(
      [] {
        train::parse_train_arguments({"--module", "llama3", "--config", "llama3_9b"});
      },
      {"--module llama3 --config llama3_9b: no such config", "llama3_debugmodel"});
  expect_error(
      [] {
        train::parse_train_arguments({"--module", "mamba", "--config", "x"});
      },
      {"--module mamba: no such module", "llama3", "qwen3"});
  expect_error([] { train::parse_train_arguments({"--module", "llama3"}); }, {"--module llama3 needs --config"});
}

}  // namespace
}  // namespace titan
