// TorchTitan's job-config keys in titan (train/torchtitan_keys.h): the docs
// table equals the parser, for every key of TorchTitan's last TOML release
// (v0.2.2) and of its current config dataclasses; TorchTitan's five stock
// TOMLs of its last TOML release load (tests/train/torchtitan_configs,
// written from their keys and values), and so does a config written with its
// current keys; keys with no effect add a notice, refused ones name the key,
// and mapped ones set titan's key, from a file and from the command line
// (also spelt as TorchTitan's tyro command line spells them); and
// the registry behind --module NAME --config NAME, every config shipped in
// configs/ loading, validating and building its model on the meta device.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "titan/core/allocator.h"
#include "titan/models/decoder_size.h"
#include "titan/models/flux/flux_diffusers_config.h"
#include "titan/parallel/activation_checkpoint.h"
#include "titan/train/config_loader.h"
#include "titan/train/config_registry.h"
#include "titan/train/config_visitor.h"
#include "titan/train/job_model_config.h"
#include "titan/train/torchtitan_keys.h"

namespace titan {
namespace torchtitan_keys_test {

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
    case train::TorchTitanKeyUse::titan_key:
      return "titan";
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

const char* release_name(train::TorchTitanRelease release) {
  switch (release) {
    case train::TorchTitanRelease::v0_2_2:
      return "v0.2.2";
    case train::TorchTitanRelease::current:
      return "current";
    case train::TorchTitanRelease::both:
      return "both";
  }
  return "?";
}

struct Row {
  std::string status, release, note;
};

// docs/torchtitan-keys.md's rows: | `key` | status | release | note |.
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
    if (cells.size() < 4) continue;
    ++*count;
    rows[cells[0].substr(1, cells[0].size() - 2)] = {cells[1], cells[2], cells[3]};
  }
  return rows;
}

TEST(TorchTitanKeys, TheDocsTableIsTheParser) {
  size_t count = 0;
  const std::map<std::string, Row> rows = documented_rows(&count);
  const std::vector<train::TorchTitanKey>& table = train::torchtitan_keys();
  // Every key of TorchTitan v0.2.2's job_config.py (149, its last TOML release) and of its current config
  // dataclasses (133: Trainer.Config and the component configs in it), each listed once.
  std::map<train::TorchTitanRelease, size_t> by_release;
  std::set<std::string> keys;
  for (const train::TorchTitanKey& entry : table) {
    ++by_release[entry.release];
    EXPECT_TRUE(keys.insert(entry.key).second) << entry.key << " is in the parser twice";
  }
  using enum train::TorchTitanRelease;
  EXPECT_EQ(by_release[v0_2_2] + by_release[both], 149u);
  EXPECT_EQ(by_release[current] + by_release[both], 133u);
  EXPECT_EQ(table.size(), 213u);
  EXPECT_EQ(count, table.size());
  EXPECT_EQ(rows.size(), table.size());
  const std::vector<std::string> ours = titan_keys();
  for (const train::TorchTitanKey& entry : table) {
    SCOPED_TRACE(entry.key);
    const auto row = rows.find(entry.key);
    if (row == rows.end()) {
      ADD_FAILURE() << entry.key << " is in the parser but not in docs/torchtitan-keys.md";
      continue;
    }
    EXPECT_EQ(row->second.status, use_name(entry.use));
    EXPECT_EQ(row->second.release, release_name(entry.release));
    EXPECT_EQ(row->second.note, entry.why);
    const bool titan_has = std::find(ours.begin(), ours.end(), entry.key) != ours.end();
    if (entry.use == train::TorchTitanKeyUse::titan_key) {
      EXPECT_TRUE(titan_has) << "documented as titan's key, but titan has no such key";
      EXPECT_EQ(train::find_torchtitan_key(entry.key), nullptr);
    } else {
      EXPECT_FALSE(titan_has) << "titan has this key: its row should say titan";
      EXPECT_EQ(train::find_torchtitan_key(entry.key), &entry);
    }
  }
  for (const auto& [key, row] : rows) {
    EXPECT_TRUE(keys.contains(key)) << key << " is in docs/torchtitan-keys.md but not in the parser";
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
// overridden; their TorchTitan-only keys map or add notices; deepseek_v3's
// builds titan's deepseek_v3 debugmodel.
TEST(TorchTitanKeys, FiveStockConfigsLoadAsTheyAre) {
  const train::JobConfig llama = load("llama3_debug_model.toml");
  EXPECT_NO_THROW(train::validate(llama));
  EXPECT_EQ(llama.activation_checkpoint.mode, "selective");
  EXPECT_EQ(llama.activation_checkpoint.selective_every, 2);  // selective_ac_option = '2'
  EXPECT_EQ(llama.model.tokenizer_path, "data/tokenizer.json");
  EXPECT_DOUBLE_EQ(llama.lr_scheduler.decay_ratio, 0.8);
  // titan's checkpoint keys now, with TorchTitan's meaning: no notice.
  EXPECT_FALSE(llama.checkpoint.enable);
  EXPECT_FALSE(llama.checkpoint.last_save_model_only);
  EXPECT_FALSE(has_notice(llama, "checkpoint."));

  for (const char* name : {"llama3_8b.toml", "qwen3_0.6b.toml"}) {
    const train::JobConfig config = load(name);
    EXPECT_NO_THROW(train::validate(config)) << name;
    // selective_ac_option = "op": TorchTitan's per-op policy, with no notice.
    EXPECT_EQ(config.activation_checkpoint.mode, "selective") << name;
    EXPECT_TRUE(config.activation_checkpoint.selective_ops) << name;
    EXPECT_FALSE(has_notice(config, "selective_ac_option")) << name;
  }
  const train::JobConfig moe = load("qwen3_moe_debug.toml");
  EXPECT_NO_THROW(train::validate(moe));
  EXPECT_EQ(moe.model.name, "qwen3_moe");  // TorchTitan's qwen3 + debugmodel_moe
  EXPECT_EQ(moe.model.flavor, "debugmodel_moe");

  const train::JobConfig deepseek = load("deepseek_v3_debug_model.toml");
  EXPECT_NO_THROW(train::validate(deepseek));
  // Its model is titan's deepseek_v3 debugmodel: latent attention, a dense first layer, then experts.
  train::JobConfig job = deepseek;
  const models::DecoderConfig model = train::resolve_model_config(job, 0);
  ASSERT_EQ(model.n_layers(), 6);
  EXPECT_TRUE(model.layers.front().mla.has_value());
  EXPECT_FALSE(model.layers.front().moe.has_value());
  EXPECT_TRUE(model.layers.back().moe.has_value());
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
  EXPECT_TRUE(has_notice(compiled, "compile.enable = true has no effect here: only CUDA jobs record steps"));
  // On CUDA, compile.enable records and replays whole steps (training.graph_capture).
  const train::JobConfig cuda = from_toml("[compile]\nenable = true\n[training]\ndevice = \"cuda\"\n");
  EXPECT_TRUE(cuda.training.graph_capture);
  EXPECT_TRUE(cuda.notices.empty());
  EXPECT_TRUE(has_notice(compiled, "training.dataloader.num_workers = \"4\""));
  // Something that would change the result: an error naming the line and the key.
  expect_error([] { from_toml("[job]\ndescription = \"x\"\n\n[metrics]\nenable_wandb = true\n"); },
               {"job.toml:5", "metrics.enable_wandb", "enable_tensorboard"});
  // Float8 is titan's own key now (tests/train/float8_config_test.cpp), the grouped-GEMM tables too.
  const train::JobConfig float8 = from_toml(
      "[model]\nconverters = [\"quantize.linear.float8\"]\n[quantize.linear.float8]\nrecipe_name = "
      "\"rowwise\"\nfilter_fqns = [\"output\"]\n[quantize.grouped_mm.float8]\nfqns = [\"experts\"]\n");
  EXPECT_TRUE(float8.notices.empty());
  EXPECT_EQ(float8.quantize.float8_recipe_name, "rowwise");
  EXPECT_EQ(float8.quantize.grouped_float8_fqns, std::vector<std::string>{"experts"});
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

// TorchTitan's checkpoint keys are titan's, with its names, defaults and
// meanings (what they save: tests/integration/checkpoint_keys_test.cpp);
// combinations TorchTitan asserts against are refused naming the keys.
TEST(TorchTitanKeys, CheckpointKeysAreTitansWithTorchTitansDefaults) {
  const train::CheckpointSection defaults;
  EXPECT_FALSE(defaults.enable);
  EXPECT_EQ(defaults.interval, 500);
  EXPECT_TRUE(defaults.last_save_model_only);
  EXPECT_FALSE(defaults.last_save_in_hf);
  EXPECT_EQ(defaults.export_dtype, "f32");  // TorchTitan's float32
  EXPECT_FALSE(defaults.enable_first_step_checkpoint);
  EXPECT_FALSE(defaults.load_only);
  EXPECT_TRUE(defaults.initial_load_model_only);
  EXPECT_TRUE(defaults.exclude_from_loading.empty());

  const train::JobConfig set = from_toml(
      "[checkpoint]\nenable = true\nlast_save_model_only = true\nlast_save_in_hf = true\nexport_dtype = \"bfloat16\"\n"
      "enable_first_step_checkpoint = true\nload_only = true\ninitial_load_path = \"step-000010\"\n"
      "initial_load_model_only = false\nexclude_from_loading = [\"dataloader\", \"lr_scheduler\"]\n");
  EXPECT_TRUE(set.notices.empty());
  EXPECT_TRUE(set.checkpoint.last_save_in_hf);
  EXPECT_EQ(set.checkpoint.export_dtype, "bf16");
  EXPECT_TRUE(set.checkpoint.enable_first_step_checkpoint);
  EXPECT_TRUE(set.checkpoint.load_only);
  EXPECT_FALSE(set.checkpoint.initial_load_model_only);
  EXPECT_EQ(set.checkpoint.exclude_from_loading, (std::vector<std::string>{"dataloader", "lr_scheduler"}));
  EXPECT_NO_THROW(train::validate(set));
  // On the command line too.
  const train::JobConfig flags =
      train::parse_train_arguments({"--checkpoint.initial_load_model_only", "false", "--checkpoint.load_only",
                                    "--checkpoint.export_dtype", "float16"})
          .config;
  EXPECT_FALSE(flags.checkpoint.initial_load_model_only);
  EXPECT_TRUE(flags.checkpoint.load_only);
  EXPECT_EQ(flags.checkpoint.export_dtype, "f16");

  const auto refused = [](const std::string& toml, const std::vector<std::string>& fragments) {
    SCOPED_TRACE(toml);
    expect_error([&] { train::validate(from_toml(toml)); }, fragments);
  };
  refused("[checkpoint]\nlast_save_in_hf = true\nlast_save_model_only = false\n",
          {"checkpoint.last_save_in_hf = true needs checkpoint.last_save_model_only = true"});
  refused("[checkpoint]\ninitial_load_in_hf = true\ninitial_load_path = \"hf\"\ninitial_load_model_only = false\n",
          {"checkpoint.initial_load_in_hf = true needs checkpoint.initial_load_model_only = true"});
  refused("[checkpoint]\nload_only = true\ncreate_seed_checkpoint = true\n",
          {"checkpoint.load_only", "checkpoint.create_seed_checkpoint"});
  refused("[checkpoint]\nexport_dtype = \"float8\"\n", {"checkpoint.export_dtype", "float8"});
  refused("[checkpoint]\nexclude_from_loading = [\"optimiser\"]\n",
          {"checkpoint.exclude_from_loading", "'optimiser'", "optimizer"});
}

TEST(TorchTitanKeys, TheCommandLineTakesThemToo) {
  const train::TrainArguments args =
      train::parse_train_arguments({"--compile.enable", "true", "--debug.seed", "11", "--metrics.enable_wandb", "0"});
  EXPECT_TRUE(has_notice(args.config, "compile.enable"));
  EXPECT_EQ(args.config.training.seed, 11);
  expect_error(
      [] {
        train::parse_train_arguments({"--job.custom_config_module", "mine"});
      },
      {"--job.custom_config_module", "Python module"});
  expect_error([] { train::parse_train_arguments({"--compile.enabel", "true"}); }, {"compile.enabel"});
}

// A config written with TorchTitan's current keys (its llama3_debugmodel's Trainer.Config as TOML) loads with no
// notice: the renamed sections and top-level keys map onto titan's.
TEST(TorchTitanKeys, CurrentKeysLoad) {
  const train::JobConfig config = from_toml(
      "hf_assets_path = \"assets/llama\"\ndump_folder = \"./outputs/current\"\n"
      "[profiler]\nenable_profiling = true\nprofile_freq = 5\nsave_traces_folder = \"traces\"\n"
      "enable_memory_snapshot = true\nsave_memory_snapshot_folder = \"snapshots\"\n"
      "[metrics]\nlog_freq = 1\n[optimizer]\nimplementation = \"fused\"\n"
      "[lr_scheduler]\nwarmup_steps = 2\ndecay_ratio = 0.8\n"
      "[training]\nnum_tokens_per_microbatch_per_dp_rank = 16384\nmax_context_length = 2048\nsteps = 10\n"
      "[dataloader]\nseed = 42\nshuffle = true\n"
      "[parallelism]\nenable_sequence_parallel = true\nspmd_backend = \"spmd_types\"\n"
      "[checkpoint]\ninterval = 10\nlast_save_model_only = false\n"
      "[activation_checkpoint]\nforce_recompute_mm_shapes_by_fqns = [\"moe.router.gate\", \"router\"]\n"
      "[validator]\nenable = true\nfreq = 5\nsteps = 10\n[validator.dataloader]\nrepeat = false\n"
      "[debug]\nseed = 3\nprint_config = false\n[loss]\nnum_chunks = 8\n");
  EXPECT_TRUE(config.notices.empty()) << config.notices.front();
  EXPECT_EQ(config.model.tokenizer_path, "assets/llama/tokenizer.json");
  EXPECT_EQ(config.job.dump_folder, "./outputs/current");
  EXPECT_TRUE(config.profiling.enable_profiling);
  EXPECT_EQ(config.profiling.profile_freq, 5);
  EXPECT_EQ(config.profiling.save_traces_folder, "traces");
  EXPECT_TRUE(config.profiling.enable_memory_snapshot);
  EXPECT_EQ(config.profiling.save_memory_snapshot_folder, "snapshots");
  EXPECT_EQ(config.training.seq_len, 2048);
  EXPECT_EQ(config.training.local_batch_size, 8);  // 16384 tokens = 8 sequences of 2048
  EXPECT_EQ(config.training.global_batch_size, -1);
  EXPECT_EQ(config.activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns,
            (std::vector<std::string>{"moe.router.gate", "router"}));
  EXPECT_TRUE(config.validation.enable);
  EXPECT_EQ(config.validation.freq, 5);
  EXPECT_EQ(config.validation.steps, 10);
  EXPECT_EQ(config.training.seed, 3);
  EXPECT_NO_THROW(train::validate(config));
}

// TorchTitan's token budgets become titan's batch sizes in sequences of training.seq_len; a budget that is not a
// whole number of sequences is refused naming the key.
TEST(TorchTitanKeys, TokenBudgetsBecomeBatchSizes) {
  const train::JobConfig budget = from_toml(
      "[training]\nmax_context_length = 1024\nnum_tokens_per_microbatch_per_dp_rank = 4096\n"
      "num_tokens_per_train_step = 32768\n");
  EXPECT_EQ(budget.training.seq_len, 1024);
  EXPECT_EQ(budget.training.local_batch_size, 4);
  EXPECT_EQ(budget.training.global_batch_size, 32);
  EXPECT_EQ(
      from_toml("[training]\nnum_tokens_per_train_step = -1\nglobal_batch_size = 64\n").training.global_batch_size,
      64);  // -1, TorchTitan's default, leaves titan's key
  expect_error([] { from_toml("[training]\nmax_context_length = 1024\nnum_tokens_per_train_step = 5000\n"); },
               {"training.num_tokens_per_train_step = 5000", "not a multiple of training.seq_len 1024"});
  expect_error(
      [] { from_toml("[training]\nmax_context_length = 1000\nnum_tokens_per_microbatch_per_dp_rank = 4096\n"); },
      {"training.num_tokens_per_microbatch_per_dp_rank = 4096", "training.seq_len 1000", "4000"});
  expect_error([] { from_toml("[training]\nnum_tokens_per_train_step = 0\n"); },
               {"job.toml:2", "training.num_tokens_per_train_step = 0 must be > 0 (or -1"});
  // Under pipeline parallelism: num_pp_microbatches micro-batches of the micro-batch budget each.
  const train::JobConfig pipelined = from_toml(
      "[parallelism]\npipeline_parallel_degree = 2\nnum_pp_microbatches = 4\n"
      "[training]\nmax_context_length = 512\nnum_tokens_per_microbatch_per_dp_rank = 1024\n");
  EXPECT_EQ(pipelined.parallelism.pipeline_parallel_microbatch_size, 2);
  EXPECT_EQ(pipelined.training.local_batch_size, 8);
  // num_pp_microbatches alone cuts titan's local batch.
  const train::JobConfig cut = from_toml(
      "[parallelism]\npipeline_parallel_degree = 2\nnum_pp_microbatches = 4\n[training]\nlocal_batch_size = 8\n");
  EXPECT_EQ(cut.parallelism.pipeline_parallel_microbatch_size, 2);
  EXPECT_EQ(cut.training.local_batch_size, 8);
  expect_error(
      [] {
        from_toml(
            "[parallelism]\npipeline_parallel_degree = 2\nnum_pp_microbatches = 4\n[training]\nlocal_batch_size = 6\n");
      },
      {"parallelism.num_pp_microbatches = 4 does not divide training.local_batch_size 6"});
  expect_error([] { from_toml("[parallelism]\nnum_pp_microbatches = 0\n"); },
               {"job.toml:2", "parallelism.num_pp_microbatches = 0 must be > 0"});
  // Without pipeline parallelism num_pp_microbatches is ignored, as in TorchTitan.
  const train::JobConfig flat = from_toml(
      "[parallelism]\nnum_pp_microbatches = 4\n[training]\nmax_context_length = 512\n"
      "num_tokens_per_microbatch_per_dp_rank = 1024\n");
  EXPECT_EQ(flat.training.local_batch_size, 2);
  EXPECT_EQ(flat.parallelism.pipeline_parallel_microbatch_size, 1);
  // On the command line, with the sequence length the command line leaves.
  const train::JobConfig flags =
      train::parse_train_arguments({"--training.num_tokens_per_train_step", "4096", "--training.seq_len", "512"})
          .config;
  EXPECT_EQ(flags.training.global_batch_size, 8);
}

// TorchTitan captures CUDA graphs unless training.disable_cuda_graphs: titan's counterpart is
// training.graph_capture, on where a whole step can be recorded; elsewhere a notice says why not.
TEST(TorchTitanKeys, DisableCudaGraphsMapsOntoGraphCapture) {
  const train::JobConfig cuda = from_toml("[training]\ndevice = \"cuda\"\ndisable_cuda_graphs = false\n");
  EXPECT_TRUE(cuda.training.graph_capture);
  EXPECT_TRUE(cuda.notices.empty());
  const train::JobConfig cpu = from_toml("[training]\ndisable_cuda_graphs = false\n");
  EXPECT_FALSE(cpu.training.graph_capture);
  EXPECT_TRUE(has_notice(cpu, "training.disable_cuda_graphs = false has no effect here: only CUDA jobs record steps"));
  const train::JobConfig pipelined = from_toml(
      "[training]\ndevice = \"cuda\"\ndisable_cuda_graphs = false\n[parallelism]\npipeline_parallel_degree = 2\n");
  EXPECT_FALSE(pipelined.training.graph_capture);
  EXPECT_TRUE(has_notice(pipelined, "pipeline parallelism"));
  EXPECT_NO_THROW(train::validate(pipelined));
  // true keeps steps uncaptured, compile.enable too; titan's own key in the same file still wins.
  const train::JobConfig disabled =
      from_toml("[compile]\nenable = true\n[training]\ndevice = \"cuda\"\ndisable_cuda_graphs = true\n");
  EXPECT_FALSE(disabled.training.graph_capture);
  EXPECT_TRUE(disabled.notices.empty());
  EXPECT_TRUE(from_toml("[training]\ndevice = \"cuda\"\ndisable_cuda_graphs = true\ngraph_capture = true\n")
                  .training.graph_capture);
}

TEST(TorchTitanKeys, CurrentKeysMapNoteOrRefuse) {
  // Refused: what titan does not build, naming the line, the key and what would work.
  expect_error([] { from_toml("[parallelism]\ntensor_parallel_degree = 2\nenable_sequence_parallel = false\n"); },
               {"job.toml:3", "parallelism.enable_sequence_parallel = \"false\"", "always trains with sequence"});
  expect_error([] { from_toml("[debug]\nbatch_invariant = true\n"); }, {"debug.batch_invariant", "not built"});
  expect_error([] { from_toml("[override]\nimports = [\"my_pkg.rope.triton_rope\"]\n"); },
               {"override.imports", "Python module"});
  expect_error([] { from_toml("[dataloader.dataset]\npath = \"c4\"\n"); },
               {"job.toml:1", "dataloader.dataset", "training.dataset_path"});
  expect_error([] { from_toml("[dataloader]\nshuffle = false\n"); }, {"dataloader.shuffle", "training.seed"});
  expect_error([] { from_toml("[optimizer]\nimplementation = \"adam\"\n"); },
               {"optimizer.implementation = \"adam\"", "fused_opt_states_bf16"});
  // No effect: a notice each.
  const train::JobConfig noted = from_toml(
      "[debug]\ndetect_anomaly = true\n[parallelism]\nspmd_backend = \"partial_dtensor\"\n[loss]\nnum_chunks = 4\n"
      "[optimizer]\nimplementation = \"foreach\"\n");
  EXPECT_EQ(noted.notices.size(), 4u);
  EXPECT_TRUE(has_notice(noted, "TorchTitan's debug.detect_anomaly = \"true\" has no effect here: titan checks"));
  EXPECT_TRUE(has_notice(noted, "parallelism.spmd_backend = \"partial_dtensor\""));
  EXPECT_TRUE(has_notice(noted, "loss.num_chunks = \"4\""));
  EXPECT_TRUE(has_notice(noted, "optimizer.implementation = \"foreach\" has no effect here"));
  // Inert: read only by what titan refuses or lacks (multimodal tokenizers, the ptrr balancer).
  EXPECT_TRUE(from_toml("[tokenizer]\nimage_token = \"<|image_pad|>\"\n[parallelism]\n"
                        "context_parallel_ptrr_mask_key = \"causal\"\n")
                  .notices.empty());
  // DeepSeek-V3's MTP loss weight, in either of TorchTitan's places, is titan's model.mtp_scale.
  EXPECT_EQ(from_toml("[loss]\nmtp_scale = 0.5\n").model.mtp_scale, 0.5);
  EXPECT_EQ(from_toml("[loss.loss_fn]\nmtp_scale = 0.25\n").model.mtp_scale, 0.25);
  expect_error([] { from_toml("[loss]\nmtp_scale = -1\n"); }, {"loss.mtp_scale", "-1"});
  // Mapped.
  EXPECT_EQ(from_toml("[optimizer]\nimplementation = \"fused_opt_states_bf16\"\n").optimizer.state_dtype, "bf16");
  const train::JobConfig whole = from_toml("[validator]\nenable = true\nsteps = -1\n");
  EXPECT_EQ(whole.validation.steps, std::numeric_limits<int64_t>::max());  // the whole held-out split
  EXPECT_NO_THROW(train::validate(whole));
  const train::JobConfig pinned = from_toml("[checkpoint]\nasync_mode = \"async_with_pinned_mem\"\n");
  EXPECT_EQ(pinned.checkpoint.async_mode, "async");
  EXPECT_TRUE(has_notice(pinned, "async_with_pinned_mem"));
  EXPECT_NO_THROW(train::validate(pinned));
}

// TorchTitan's tyro command line: top-level keys bare, hyphens for underscores, --section.no-key for false, and
// the activation-checkpointing policy as a subcommand.
TEST(TorchTitanKeys, TyroSpellingsOnTheCommandLine) {
  const train::JobConfig config =
      train::parse_train_arguments({"--dump_folder", "out", "--hf_assets_path", "assets/qwen",
                                    "--profiler.enable-profiling", "--metrics.no-enable-wandb", "--compile.no-enable",
                                    "--metrics.enable-tensorboard", "--training.no-memory-check",
                                    "activation_checkpoint:full"})
          .config;
  EXPECT_EQ(config.job.dump_folder, "out");
  EXPECT_EQ(config.model.tokenizer_path, "assets/qwen/tokenizer.json");
  EXPECT_TRUE(config.profiling.enable_profiling);
  EXPECT_TRUE(config.metrics.enable_tensorboard);
  EXPECT_FALSE(config.training.memory_check);
  EXPECT_EQ(config.activation_checkpoint.mode, "full");
  EXPECT_TRUE(config.notices.empty());
  const train::JobConfig selective = train::parse_train_arguments({"activation-checkpoint:selective"}).config;
  EXPECT_EQ(selective.activation_checkpoint.mode, "selective");
  EXPECT_TRUE(selective.activation_checkpoint.selective_ops);  // TorchTitan's selective policy is per op
  EXPECT_EQ(train::parse_train_arguments({"activation_checkpoint:memory-budget"}).config.activation_checkpoint.mode,
            "memory_budget");
  expect_error([] { train::parse_train_arguments({"activation_checkpoint:sometimes"}); },
               {"activation_checkpoint:sometimes", "selective, full, memory-budget and none"});
  expect_error([] { train::parse_train_arguments({"--parallelism.no-enable-sequence-parallel"}); },
               {"--parallelism.enable_sequence_parallel", "sequence parallelism"});
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

std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The registered config module/name loads, validates, and builds its model on
// the meta device (shapes only: nothing allocated) with its activation
// checkpointing applied.
void check_registered_config(const std::string& module, const std::string& name) {
  train::JobConfig config = train::parse_train_arguments({"--module", module, "--config", name}).config;
  train::validate(config);
  if (config.model.name == "flux") {
    // FLUX is no decoder: its transformer's Diffusers config and its encoders'
    // folders must be there (the example's paths are relative to the repository root).
    const std::filesystem::path source(TITAN_SOURCE_DIR);
    models::flux::read_diffusers_flux_config((source / config.model.hf_config).string()).validate();
    for (const std::string& folder : {config.encoder.t5_encoder, config.encoder.clip_encoder}) {
      EXPECT_TRUE(std::filesystem::exists(source / folder / "config.json")) << folder;
      EXPECT_TRUE(std::filesystem::exists(source / folder / "tokenizer.json")) << folder;
    }
    return;
  }
  const int64_t live = memory_stats(DeviceType::cpu).live_bytes;
  const models::DecoderConfig model_config = train::resolve_model_config(config, 0);
  const auto model = model_config.build(Device::meta());
  EXPECT_EQ(model->num_parameters(), models::parameter_count(model_config));
  EXPECT_GT(model->num_parameters(), 0);
  if (config.activation_checkpoint.mode != "memory_budget") {  // job set-up picks that plan
    std::vector<nn::Block*> blocks;
    for (const auto& block : *model->layers) blocks.push_back(block.get());
    parallel::apply_activation_checkpointing(
        blocks, parallel::parse_activation_checkpoint_mode(config.activation_checkpoint.mode),
        config.activation_checkpoint.selective_every,
        {config.activation_checkpoint.selective_ops,
         config.activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns});
  }
  EXPECT_EQ(memory_stats(DeviceType::cpu).live_bytes, live);
}

// Every TOML under configs/ (the source folder, walked as the registry walks
// share/titan/configs) is registered with the same text and passes
// check_registered_config; the TorchTitan translations (every module but
// titan's own) start by naming the TorchTitan function they mirror, which is
// their name.
TEST(ConfigRegistry, EveryShippedConfigLoadsValidatesAndBuildsOnMeta) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(TITAN_SOURCE_DIR) / "configs";
  std::map<std::pair<std::string, std::string>, fs::path> registered;
  for (const train::RegisteredConfig& config : train::registered_configs())
    registered[{config.module, config.name}] = config.path;
  std::set<std::string> modules;
  int shipped = 0;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".toml") continue;
    const fs::path relative = fs::relative(entry.path(), root);
    const std::string module = relative.has_parent_path() ? relative.parent_path().string() : "titan";
    const std::string name = entry.path().stem().string();
    SCOPED_TRACE(module + "/" + name);
    ++shipped;
    modules.insert(module);
    const std::string text = file_text(entry.path());
    if (module != "titan") {
      const std::string first_line = text.substr(0, text.find('\n'));
      EXPECT_TRUE(first_line.starts_with("# TorchTitan's " + name + "() ")) << first_line;
    }
    const auto found = registered.find({module, name});
    if (found == registered.end()) {
      ADD_FAILURE() << "not in share/titan/configs: build the target titan_share_data";
      continue;
    }
    EXPECT_TRUE(file_text(found->second) == text) << found->second << " is stale: build the target titan_share_data";
    try {
      check_registered_config(module, name);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
  EXPECT_GE(shipped, 17);
  for (const char* module : {"llama3", "qwen3", "titan"}) EXPECT_TRUE(modules.contains(module)) << module;
}

}  // namespace torchtitan_keys_test
}  // namespace titan
