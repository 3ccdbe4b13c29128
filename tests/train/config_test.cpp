// The job config: TOML files, --section.key overrides, help and dump text,
// and the errors a user gets for mistakes (file, line, key, suggestion).
#include <gtest/gtest.h>

#include <filesystem>

#include <cmath>
#include <fstream>
#include <functional>

#include "titan/core/error.h"

#include "titan/models/model_spec.h"
#include "titan/train/config_loader.h"

namespace titan {
namespace config_test {

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Config, LoadsTomlWithTorchTitanKeys) {
  train::JobConfig config;
  train::load_toml_string(config, R"(
[training]
local_batch_size = 4
seq_len = 256
steps = 7
max_norm = 0.5
[optimizer]
lr = 3e-4
no_weight_decay = ["norm"]
[lr_scheduler]
warmup_steps = 2
decay_type = "cosine"
[parallelism]
data_parallel_shard_degree = 4
)",
                          "job.toml");
  EXPECT_EQ(config.training.local_batch_size, 4);
  EXPECT_EQ(config.training.seq_len, 256);
  EXPECT_EQ(config.training.steps, 7);
  EXPECT_DOUBLE_EQ(config.training.max_norm, 0.5);
  EXPECT_DOUBLE_EQ(config.optimizer.lr, 3e-4);
  EXPECT_EQ(config.optimizer.no_weight_decay, std::vector<std::string>{"norm"});
  EXPECT_EQ(config.lr_scheduler.decay_type, "cosine");
  EXPECT_EQ(config.parallelism.data_parallel_shard_degree, 4);
  // An integer where a float is expected is fine (TOML writes 1 for 1.0).
  train::load_toml_string(config, "[training]\nmax_norm = 2\n", "job.toml");
  EXPECT_DOUBLE_EQ(config.training.max_norm, 2.0);
}

TEST(Config, ErrorsNameFileLineKeyAndSuggest) {
  train::JobConfig config;
  std::string message = error_of([&] { train::load_toml_string(config, "[training]\n\nstesp = 3\n", "job.toml"); });
  EXPECT_NE(message.find("job.toml:3"), std::string::npos) << message;
  EXPECT_NE(message.find("stesp"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'steps'"), std::string::npos) << message;

  message = error_of([&] { train::load_toml_string(config, "[trainng]\nsteps = 3\n", "job.toml"); });
  EXPECT_NE(message.find("did you mean 'training'"), std::string::npos) << message;

  message = error_of([&] { train::load_toml_string(config, "[training]\nsteps = \"many\"\n", "job.toml"); });
  EXPECT_NE(message.find("job.toml:2"), std::string::npos) << message;
  EXPECT_NE(message.find("must be an integer"), std::string::npos) << message;

  message = error_of([&] { train::load_toml_string(config, "[training\nsteps = 3\n", "job.toml"); });
  EXPECT_NE(message.find("job.toml:1"), std::string::npos) << message;
  EXPECT_NE(message.find("invalid TOML"), std::string::npos) << message;

  message = error_of([&] { train::load_toml_file(config, "/nonexistent/job.toml"); });
  EXPECT_NE(message.find("/nonexistent/job.toml"), std::string::npos) << message;
}

// A file written for another tool (TorchTitan's own TOMLs) has several keys
// titan lacks: every one is listed in one error, each with its line, so one
// edit fixes the file instead of one rerun per key. Nothing is applied.
TEST(Config, EveryUnknownSectionAndKeyIsReportedInOneError) {
  train::JobConfig config;
  const std::string message = error_of([&] {
    train::load_toml_string(config, R"([compile]
enable = true
[training]
steps = 9
stesp = 3
[optimizer]
lr = 1e-3
implementation = "foreach"
[float8]
enable_fsdp_float8_all_gather = false
)",
                            "torchtitan.toml");
  });
  // [compile] and optimizer.implementation are TorchTitan's keys (docs/torchtitan-keys.md): accepted.
  EXPECT_NE(message.find("torchtitan.toml: 2 unknown or misplaced items:"), std::string::npos) << message;
  EXPECT_EQ(message.find("compile"), std::string::npos) << message;
  EXPECT_EQ(message.find("implementation"), std::string::npos) << message;
  EXPECT_NE(message.find("torchtitan.toml:5: unknown key [training] stesp (did you mean 'steps'?)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("torchtitan.toml:9: unknown section [float8]"), std::string::npos) << message;
  EXPECT_EQ(config.training.steps, train::JobConfig{}.training.steps) << "a refused file changed the config";
}

TEST(Config, AConfigPathThatIsNotARegularFileIsAnError) {
  train::JobConfig config;
  EXPECT_NE(error_of([&] { train::load_toml_file(config, ::testing::TempDir()); }).find("is a folder, not a file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { train::load_toml_file(config, "/dev/null"); }).find("is a special file"), std::string::npos);
}

// TorchTitan's pipeline keys; module_fqns_per_model_part is a list of lists in
// TOML and "modules by spaces, parts by commas" on the command line.
TEST(Config, PipelineKeysFromTomlAndTheCommandLine) {
  train::JobConfig config;
  train::load_toml_string(config, R"(
[parallelism]
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "ZBVZeroBubble"
pipeline_parallel_microbatch_size = 2
pipeline_parallel_first_stage_less_layers = 0
module_fqns_per_model_part = [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]]
)",
                          "job.toml");
  EXPECT_EQ(config.parallelism.pipeline_parallel_degree, 2);
  EXPECT_EQ(config.parallelism.pipeline_parallel_schedule, "ZBVZeroBubble");
  EXPECT_EQ(config.parallelism.pipeline_parallel_microbatch_size, 2);
  EXPECT_EQ(config.parallelism.pipeline_parallel_first_stage_less_layers, 0);
  const std::vector<std::string> parts{"tok_embeddings layers.0", "layers.1 norm output"};
  EXPECT_EQ(config.parallelism.module_fqns_per_model_part, parts);
  const train::TrainArguments args = train::parse_train_arguments(
      {"--parallelism.module_fqns_per_model_part", "tok_embeddings layers.0,layers.1 norm output"});
  EXPECT_EQ(args.config.parallelism.module_fqns_per_model_part, parts);
  EXPECT_NE(error_of([] {
              train::JobConfig bad;
              train::load_toml_string(bad, "[parallelism]\nmodule_fqns_per_model_part = [[\"layers.0\", 3]]\n",
                                      "job.toml");
            }).find("job.toml"),
            std::string::npos);
  config = {};
  config.parallelism.pipeline_parallel_degree = 2;
  config.training.local_batch_size = 3;
  config.parallelism.pipeline_parallel_microbatch_size = 2;
  EXPECT_NE(error_of([&] { train::validate(config); }).find("parallelism.pipeline_parallel_microbatch_size 2"),
            std::string::npos);
}

// TorchTitan's context-parallel keys, and what validation refuses before any rank starts.
TEST(Config, ContextParallelKeysAndTheirChecks) {
  train::JobConfig config;
  train::load_toml_string(config, R"(
[parallelism]
context_parallel_degree = 4
context_parallel_rotate_method = "alltoall"
context_parallel_load_balancer = "none"
[training]
seq_len = 64
)",
                          "job.toml");
  EXPECT_EQ(config.parallelism.context_parallel_degree, 4);
  EXPECT_EQ(config.parallelism.context_parallel_rotate_method, "alltoall");
  EXPECT_EQ(config.parallelism.context_parallel_load_balancer, "none");
  EXPECT_NO_THROW(train::validate(config));
  config.training.seq_len = 60;  // not a multiple of 2 x 4
  EXPECT_NE(error_of([&] { train::validate(config); }).find("training.seq_len 60"), std::string::npos);
  config.training.seq_len = 64;
  config.model.attention = "naive";
  EXPECT_NE(error_of([&] { train::validate(config); }).find("model.attention"), std::string::npos);
  config.model.attention = "flash";
  config.parallelism.context_parallel_rotate_method = "ring";
  EXPECT_NE(error_of([&] { train::validate(config); }).find("context_parallel_rotate_method 'ring'"),
            std::string::npos);
  config.parallelism.context_parallel_rotate_method = "allgather";
  config.parallelism.context_parallel_load_balancer = "zigzag";
  EXPECT_NE(error_of([&] { train::validate(config); }).find("context_parallel_load_balancer 'zigzag'"),
            std::string::npos);
}

// TorchTitan's qwen3 holds its MoE flavors; titan keeps them as qwen3_moe.
// debugmodel_moe is TorchTitan's shape: 8 routed layers of 64 experts, 8 per
// token, 16 heads of 128 (8 for keys and values), dim 256, vocabulary 2048.
TEST(Config, TorchTitansQwen3MoeFlavorsSelectTheMoeFamily) {
  const train::TrainArguments moe =
      train::parse_train_arguments({"--model.name", "qwen3", "--model.flavor", "debugmodel_moe"});
  EXPECT_EQ(moe.config.model.name, "qwen3_moe");
  const models::DecoderConfig config = models::model_config("qwen3_moe", "debugmodel_moe", 0);
  ASSERT_EQ(config.n_layers(), 8);
  EXPECT_EQ(config.dim(), 256);
  EXPECT_EQ(config.vocab_size, 2048);
  for (const nn::TransformerBlockConfig& layer : config.layers) {
    ASSERT_TRUE(layer.moe.has_value());
    EXPECT_EQ(layer.moe->num_experts, 64);
    EXPECT_EQ(layer.moe->top_k, 8);
    EXPECT_EQ(layer.moe->hidden_dim, 768);
    EXPECT_EQ(layer.attention.n_heads, 16);
    EXPECT_EQ(layer.attention.n_kv_heads, 8);
    EXPECT_EQ(layer.attention.head_size(), 128);
  }
  EXPECT_EQ(train::parse_train_arguments({"--model.name", "qwen3", "--model.flavor", "235B-A22B"}).config.model.name,
            "qwen3_moe");
  // qwen3's own flavors and other families keep their names; unknown flavors are left to the flavor check.
  EXPECT_EQ(train::parse_train_arguments({"--model.name", "qwen3", "--model.flavor", "0.6B"}).config.model.name,
            "qwen3");
  EXPECT_EQ(train::parse_train_arguments({"--model.name", "qwen3", "--model.flavor", "nope"}).config.model.name,
            "qwen3");
}

TEST(Config, OverridesParseAndValidate) {
  train::TrainArguments args =
      train::parse_train_arguments({"--training.steps", "12", "--optimizer.lr=1e-3", "--model.fused_loss", "false",
                                    "--optimizer.no_weight_decay", "norm,bias"});
  EXPECT_EQ(args.config.training.steps, 12);
  EXPECT_DOUBLE_EQ(args.config.optimizer.lr, 1e-3);
  EXPECT_FALSE(args.config.model.fused_loss);
  EXPECT_EQ(args.config.optimizer.no_weight_decay, (std::vector<std::string>{"norm", "bias"}));
  EXPECT_NE(error_of([] {
              train::parse_train_arguments({"--training.steps", "ten"});
            }).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              train::parse_train_arguments({"--training.seqlen", "5"});
            }).find("did you mean 'seq_len'"),
            std::string::npos);
  EXPECT_NE(error_of([] { train::parse_train_arguments({"--training.steps"}); }).find("needs a value"),
            std::string::npos);
  // A bare flag is only a boolean's "true": a string key followed by another option is a mistake, not "true".
  EXPECT_NE(error_of([] {
              train::parse_train_arguments({"--job.dump_folder", "--training.steps", "5"});
            }).find("--job.dump_folder needs a value"),
            std::string::npos);
  EXPECT_NE(error_of([] { train::parse_train_arguments({"--checkpoint.exclude_from_loading"}); }).find("needs a value"),
            std::string::npos);
  EXPECT_TRUE(train::parse_train_arguments({"--checkpoint.create_seed_checkpoint", "--training.steps", "5"})
                  .config.checkpoint.create_seed_checkpoint);
  EXPECT_NE(error_of([] { train::parse_train_arguments({"steps"}); }).find("unexpected argument"), std::string::npos);

  train::JobConfig config;
  config.lr_scheduler.decay_type = "cosin";
  EXPECT_NE(error_of([&] { train::validate(config); }).find("did you mean 'cosine'"), std::string::npos);
  config = {};
  config.training.local_batch_size = 0;
  EXPECT_NE(error_of([&] { train::validate(config); }).find("training.local_batch_size"), std::string::npos);
  EXPECT_EQ(error_of([] { train::validate(train::JobConfig{}); }), "");
}

// Values that would train to NaN, or mean nothing, are refused naming the key
// (they were accepted once: beta2 = 1 and lr = inf trained to NaN and exported a NaN model).
TEST(Config, ValuesThatCannotTrainAreErrorsNamingTheKey) {
  const double nan = std::nan(""), inf = INFINITY;
  const std::vector<std::pair<std::function<void(train::JobConfig&)>, std::string>> cases = {
      {[](train::JobConfig& c) { c.optimizer.eps = -1e-8; }, "optimizer.eps"},
      {[&](train::JobConfig& c) { c.optimizer.eps = nan; }, "optimizer.eps"},
      {[&](train::JobConfig& c) { c.training.max_norm = nan; }, "training.max_norm"},
      {[](train::JobConfig& c) { c.model.vocab_size = -5; }, "model.vocab_size"},
      {[](train::JobConfig& c) { c.optimizer.beta2 = 1.0; }, "optimizer.beta2"},
      {[](train::JobConfig& c) { c.optimizer.beta1 = -0.1; }, "optimizer.beta1"},
      {[&](train::JobConfig& c) { c.optimizer.lr = inf; }, "optimizer.lr"},
      {[&](train::JobConfig& c) { c.optimizer.lr = nan; }, "optimizer.lr"},
      {[&](train::JobConfig& c) { c.optimizer.weight_decay = nan; }, "optimizer.weight_decay"},
      {[](train::JobConfig& c) { c.training.seq_len = int64_t{1} << 40; }, "tokens per micro-batch"},
      {[](train::JobConfig& c) { c.checkpoint.keep_latest_k = -3; }, "checkpoint.keep_latest_k must be >= 0"},
      {[](train::JobConfig& c) { c.checkpoint.load_step = -2; }, "checkpoint.load_step"},
      {[](train::JobConfig& c) { c.model.loss_vocab_chunk = -1; }, "model.loss_vocab_chunk"},
      {[](train::JobConfig& c) { c.training.global_batch_size = 0; }, "training.global_batch_size"},
      {[&](train::JobConfig& c) { c.comm.timeout_seconds = nan; }, "comm.timeout_seconds"},
      {[](train::JobConfig& c) { c.comm.timeout_seconds = 0; }, "comm.timeout_seconds"},
      {[&](train::JobConfig& c) { c.metrics.peak_tflops = inf; }, "metrics.peak_tflops"},
      {[&](train::JobConfig& c) { c.lr_scheduler.decay_ratio = nan; }, "lr_scheduler.decay_ratio"},
      // A separate validation set is FLUX's (captions encoded on the fly); llama3 validates on validation.split.
      {[](train::JobConfig& c) { c.validation.dataset_path = "val.jsonl"; }, "validation.dataset_path val.jsonl"},
  };
  for (const auto& [edit, key] : cases) {
    train::JobConfig config;
    edit(config);
    EXPECT_NE(error_of([&] { train::validate(config); }).find(key), std::string::npos) << key;
  }
  // No clipping (max_norm <= 0, or inf) stays allowed.
  train::JobConfig config;
  config.training.max_norm = inf;
  EXPECT_EQ(error_of([&] { train::validate(config); }), "");
}

// Graph capture records CUDA work: on the CPU, with the host-counted plain
// loss, or with offload's host waits it is refused before any work.
TEST(Config, GraphCaptureNeedsCudaTheFusedLossAndNoOffload) {
  train::JobConfig config;
  config.training.graph_capture = true;
  EXPECT_NE(error_of([&] { train::validate(config); }).find("needs training.device = cuda"), std::string::npos);
  config.training.device = "cuda";
  EXPECT_EQ(error_of([&] { train::validate(config); }), "");
  config.model.fused_loss = false;
  EXPECT_NE(error_of([&] { train::validate(config); }).find("model.fused_loss"), std::string::npos);
  config.model.fused_loss = true;
  config.activation_checkpoint.mode = "offload";
  EXPECT_NE(error_of([&] { train::validate(config); }).find("offload"), std::string::npos);
}

TEST(Config, PrintConfigRoundTripsAndHelpListsEveryKey) {
  train::JobConfig config;
  config.training.steps = 77;
  config.optimizer.lr = 1e-5;
  config.model.tokenizer_path = "a \"quoted\" path";
  config.job.description = "line\nbreak\r\ttab \x01 control";  // found by the config fuzzer
  const std::string dumped = train::config_to_toml(config);
  train::JobConfig reloaded;
  train::load_toml_string(reloaded, dumped, "dump");
  EXPECT_EQ(train::config_to_toml(reloaded), dumped);
  EXPECT_EQ(reloaded.training.steps, 77);
  EXPECT_EQ(reloaded.model.tokenizer_path, "a \"quoted\" path");
  EXPECT_EQ(reloaded.job.description, config.job.description);

  const std::string help = train::config_help();
  for (const char* key :
       {"--training.local_batch_size", "--training.seq_len", "--training.steps", "--training.max_norm",
        "--optimizer.lr", "--lr_scheduler.warmup_steps", "--parallelism.data_parallel_shard_degree",
        "--parallelism.tensor_parallel_degree", "--checkpoint.interval", "--metrics.log_freq", "--job.dump_folder",
        "--activation_checkpoint.mode", "--validation.freq"}) {
    EXPECT_NE(help.find(key), std::string::npos) << key;
  }
  EXPECT_NE(help.find("(default 512)"), std::string::npos);
}

TEST(Config, ShippedConfigsLoad) {
  int shipped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TITAN_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    train::JobConfig config;
    train::load_toml_file(config, entry.path().string());
    train::validate(config);
    ++shipped;
  }
  EXPECT_GE(shipped, 2);
}

}  // namespace config_test
}  // namespace titan
