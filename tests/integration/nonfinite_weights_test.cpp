// Weights holding NaN or Inf, through every way a job loads weights: convert
// refuses them naming each tensor (or, with --allow-nonfinite, converts them
// with a warning), generate refuses them (or stops at the first new token with
// an error naming it, since NaN now reaches the logits), and a training job
// refuses them before its first step (or, allowed, stops at step 1 on a NaN
// loss). Before this, a NaN q projection generated the clean model's text.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <string>

#include "cli_job.h"
#include "titan/checkpoint/safetensors.h"

namespace titan {
namespace nonfinite_weights_test {

namespace fs = std::filesystem;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "nonfinite_weights_test";
  return dir;
}

using Result = testing::CommandResult;
using testing::expect_user_error;

Result run(const std::string& command, const std::string& name) {
  return testing::run_to_completion(command, workdir() / (name + ".log"));
}

class NonFiniteWeights : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(workdir());
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
    testing::write_tiny_llama_config(workdir());
    testing::run_ok(job(workdir() / "clean_job", "--training.steps 1"), workdir() / "clean_job.log");
    // The export with layer 0's q projection all NaN, and one Inf in the output projection.
    fs::copy(clean(), spoiled());
    const fs::path weights = spoiled() / "model.safetensors";
    checkpoint::NamedTensors tensors;
    for (auto& [name, tensor] : testing::read_all_tensors(weights)) {
      if (name == "layers.0.attention.wq.weight") {
        tensor = Tensor::full(tensor.shape(), std::numeric_limits<double>::quiet_NaN(), tensor.dtype());
      }
      if (name == "output.weight") {
        std::vector<float> values = tensor.to_floats();
        values[5] = std::numeric_limits<float>::infinity();
        tensor = Tensor::from_floats(values, tensor.shape()).to(tensor.dtype());
      }
      tensors.emplace_back(name, tensor);
    }
    checkpoint::write_safetensors(weights.string(), tensors);
  }
  static std::string job(const fs::path& dump, const std::string& extra) {
    return testing::tiny_train_command(workdir() / "data", workdir() / "config.json", dump,
                                       "--validation.enable false " + extra);
  }
  static fs::path clean() { return workdir() / "clean_job" / "checkpoint" / "step-000001"; }
  static fs::path spoiled() { return workdir() / "spoiled"; }
};

TEST_F(NonFiniteWeights, ConvertRefusesThemNamingEachTensorOrWarnsWhenAllowed) {
  fs::remove_all(workdir() / "hf");
  const std::string convert =
      kCli + " convert --from titan " + spoiled().string() + " --to hf " + (workdir() / "hf").string();
  expect_user_error(run(convert, "convert"),
                    {"2 tensor(s) hold NaN or Inf", "layers.0.attention.wq.weight: 65536 NaN, 0 Inf of 65536 values",
                     "output.weight: 0 NaN, 1 Inf", "--allow-nonfinite"});
  EXPECT_FALSE(fs::exists(workdir() / "hf"));
  const Result allowed = run(convert + " --allow-nonfinite", "convert_allowed");
  EXPECT_EQ(allowed.status, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("warning"), std::string::npos) << allowed.output;
  EXPECT_NE(allowed.output.find("layers.0.attention.wq.weight"), std::string::npos) << allowed.output;
  // And back: the HF folder's NaN is caught on the way in too.
  expect_user_error(
      run(kCli + " convert --from hf " + (workdir() / "hf").string() + " --to titan " + (workdir() / "back").string(),
          "convert_back"),
      {(workdir() / "hf").string(), "layers.0.attention.wq.weight"});
}

TEST_F(NonFiniteWeights, GenerateRefusesThemOrStopsAtTheFirstNonFiniteLogits) {
  const std::string generate = kCli + " generate --checkpoint " + spoiled().string() + " --prompt 'The' ";
  expect_user_error(run(generate, "generate"),
                    {"model.safetensors", "layers.0.attention.wq.weight", "--allow-nonfinite"});
  // Allowed, the NaN of the q projection reaches the logits (it used to vanish
  // in attention): generation stops at once, naming the token.
  expect_user_error(run(generate + "--allow-nonfinite", "generate_allowed"),
                    {"the logits of new token 1", "are not finite"});
  const Result from_clean =
      run(kCli + " generate --checkpoint " + clean().string() + " --prompt 'The' --max-new-tokens 4", "generate_clean");
  EXPECT_EQ(from_clean.status, 0) << from_clean.output;
}

TEST_F(NonFiniteWeights, TrainingRefusesThemBeforeTheFirstStepOrStopsOnTheNanLoss) {
  const std::string from_spoiled = "--training.steps 2 --checkpoint.initial_load_path " + spoiled().string();
  const Result refused = run(job(workdir() / "train_refused", from_spoiled), "train_refused");
  expect_user_error(refused,
                    {spoiled().string(), "layers.0.attention.wq.weight", "checkpoint.allow_nonfinite_weights"});
  EXPECT_EQ(refused.output.find("step     1"), std::string::npos) << refused.output;
  const Result allowed = run(
      job(workdir() / "train_allowed", from_spoiled + " --checkpoint.allow_nonfinite_weights true"), "train_allowed");
  expect_user_error(allowed, {"step 1: the loss is", "nan and the gradient norm"});
}

}  // namespace nonfinite_weights_test
}  // namespace titan
