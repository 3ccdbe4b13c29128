// TorchTitan's stock TOMLs (tests/train/torchtitan_configs, its last TOML
// release's keys and values) train in titan with only the data and
// tokenizer paths overridden, and the step count and sequence cut to fit a
// test: the llama3 debug job and the qwen3 MoE debug job (TorchTitan's
// `qwen3` + `debugmodel_moe`, 8 routed layers of 64 experts). Each prints its
// notes for the TorchTitan keys that change nothing here, and learns; with
// checkpoint.enable = false, as they have it, nothing is saved.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "cli_job.h"

namespace titan {
namespace torchtitan_configs_test {

namespace fs = std::filesystem;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "torchtitan_configs_test";
  return dir;
}

class TorchTitanConfigs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(workdir());
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
  }

  static std::string train(const std::string& name, const std::string& cut) {
    const fs::path data = workdir() / "data";
    return testing::run_ok(fmt::format("{} train --config {}/tests/train/torchtitan_configs/{}.toml "
                                       "--training.dataset_path {} --model.tokenizer_path {}/tokenizer.json "
                                       "--job.dump_folder {} --metrics.progress false {}",
                                       TITAN_CLI_PATH, TITAN_SOURCE_DIR, name, data.string(), data.string(),
                                       (workdir() / name).string(), cut),
                           workdir() / (name + ".log"));
  }
};

TEST_F(TorchTitanConfigs, Llama3DebugTrains) {
  const std::string output = train("llama3_debug_model", "--training.steps 4 --training.seq_len 128");
  EXPECT_NE(output.find("titan: llama3 debugmodel"), std::string::npos) << output;
  // Its [checkpoint] has enable = false (and last_save_model_only = false, titan's key now): as in TorchTitan,
  // nothing is saved, not even a model export.
  EXPECT_EQ(output.find("checkpoint.last_save_model_only"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(workdir() / "llama3_debug_model" / "checkpoint")) << output;
  const std::vector<double> losses =
      testing::metrics_column(workdir() / "llama3_debug_model" / "metrics.jsonl", "loss");
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_TRUE(std::isfinite(losses.back()));
  EXPECT_LT(losses.back(), losses.front());
}

TEST_F(TorchTitanConfigs, Qwen3MoeDebugTrains) {
  const std::string output =
      train("qwen3_moe_debug", "--training.steps 2 --training.seq_len 64 --training.local_batch_size 2");
  EXPECT_NE(output.find("titan: qwen3_moe debugmodel_moe"), std::string::npos) << output;
  // Its selective_ac_option = "op" runs TorchTitan's per-op policy (activation_checkpoint.selective_ops): no notice.
  EXPECT_EQ(output.find("selective_ac_option"), std::string::npos) << output;
  const std::vector<double> losses = testing::metrics_column(workdir() / "qwen3_moe_debug" / "metrics.jsonl", "loss");
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(losses.back()));
}

// TorchTitan's deepseek_v3 debug TOML trains titan's deepseek_v3 debugmodel
// (latent attention with YaRN, softmax experts with shared ones, a dense first layer).
TEST_F(TorchTitanConfigs, DeepseekV3DebugTrains) {
  const std::string output =
      train("deepseek_v3_debug_model", "--training.steps 2 --training.seq_len 64 --training.local_batch_size 2");
  EXPECT_NE(output.find("titan: deepseek_v3 debugmodel"), std::string::npos) << output;
  const std::vector<double> losses =
      testing::metrics_column(workdir() / "deepseek_v3_debug_model" / "metrics.jsonl", "loss");
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(losses.back()));
}

}  // namespace torchtitan_configs_test
}  // namespace titan
