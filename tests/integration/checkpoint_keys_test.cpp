// TorchTitan's checkpoint keys mean in titan what they mean in TorchTitan
// (v0.2.2's job_config.py and components/checkpoint.py), on real `titan
// train` runs of the tiny Llama (milliseconds a step): checkpoint.enable =
// false saves nothing; with it, the full state every interval (and after step
// 1 with enable_first_step_checkpoint) and at the last step the model only
// (the model export in export_dtype, or a Hugging Face folder with
// last_save_in_hf) or, with last_save_model_only = false, the full state;
// load_only resumes and saves nothing; initial_load_model_only = false
// restores another job's whole training state, so its next steps are the
// uninterrupted run's. The refusals that need the files are here too (the
// others: tests/train/torchtitan_keys_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli_job.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/safetensors.h"

namespace titan {
namespace checkpoint_keys_test {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::expect_user_error;
using testing::file_text;
using testing::metrics_column;
using testing::read_all_tensors;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "checkpoint_keys_test";
  return dir;
}

class CheckpointKeys : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
    testing::write_tiny_llama_config(workdir());
  }
  // `titan train` of the tiny Llama into dump folder `name` (emptied first
  // unless `keep`), f32 so that every run of the same steps is bitwise equal.
  static std::string command(const std::string& name, const std::string& extra) {
    return testing::tiny_train_command(workdir() / "data", workdir() / "config.json", workdir() / name,
                                       "--validation.enable false --training.mixed_precision_param f32 "
                                       "--model.document_masking false --metrics.log_freq 1 " +
                                           extra);
  }
  static std::string train(const std::string& name, const std::string& extra, bool keep = false,
                           const std::string& env = "") {
    if (!keep) fs::remove_all(workdir() / name);
    return testing::run_ok(env + command(name, extra), workdir() / (name + ".log"));
  }
  static CommandResult train_failing(const std::string& name, const std::string& extra) {
    fs::remove_all(workdir() / name);
    return testing::run_to_completion(command(name, extra), workdir() / (name + ".log"));
  }
  static fs::path step_folder(const std::string& name, int64_t step) {
    return workdir() / name / "checkpoint" / checkpoint::step_folder_name(step);
  }
  // The names in job `name`'s checkpoint folder.
  static std::set<std::string> saved(const std::string& name) {
    std::set<std::string> names;
    const fs::path folder = workdir() / name / "checkpoint";
    if (!fs::exists(folder)) return names;
    for (const auto& entry : fs::directory_iterator(folder)) names.insert(entry.path().filename().string());
    return names;
  }
  static bool is_model_export(const fs::path& folder) {
    return fs::is_regular_file(folder / "model.safetensors") && fs::is_regular_file(folder / "job.toml") &&
           !fs::exists(folder / checkpoint::kMetadataFile);
  }
  static std::vector<double> losses(const std::string& name) {
    return metrics_column(workdir() / name / "metrics.jsonl", "loss");
  }
};

void expect_same_tensors(const std::map<std::string, Tensor>& expected, const std::map<std::string, Tensor>& actual) {
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    ASSERT_TRUE(actual.count(name)) << name;
    EXPECT_EQ(actual.at(name).dtype(), tensor.dtype()) << name;
    EXPECT_EQ(actual.at(name).to_floats(), tensor.to_floats()) << name;
  }
}

TEST_F(CheckpointKeys, EnableFalseSavesNothing) {
  const std::string output = train("off", "--training.steps 3 --checkpoint.enable false --checkpoint.interval 1");
  EXPECT_EQ(losses("off").size(), 3u);
  EXPECT_FALSE(fs::exists(workdir() / "off" / "checkpoint")) << output;
  EXPECT_EQ(output.find("model written to"), std::string::npos) << output;
  EXPECT_EQ(output.find("checkpoint of step"), std::string::npos) << output;
}

// Interval saves hold the full state; the last save the model only (the
// export, in export_dtype) or, with last_save_model_only = false, the full state.
TEST_F(CheckpointKeys, LastSaveModelOnlyOrTheFullState) {
  train("model_only", "--training.steps 3 --checkpoint.interval 2 --checkpoint.export_dtype bfloat16");
  EXPECT_EQ(saved("model_only"), (std::set<std::string>{"step-000002", "step-000003"}));
  EXPECT_TRUE(checkpoint::is_complete_checkpoint(step_folder("model_only", 2).string()));
  EXPECT_FALSE(fs::exists(step_folder("model_only", 2) / "model.safetensors"));
  ASSERT_TRUE(is_model_export(step_folder("model_only", 3)));
  EXPECT_FALSE(checkpoint::is_complete_checkpoint(step_folder("model_only", 3).string()));
  const auto exported = read_all_tensors(step_folder("model_only", 3) / "model.safetensors");
  ASSERT_TRUE(exported.count("layers.0.attention.wq.weight"));
  EXPECT_EQ(exported.at("layers.0.attention.wq.weight").dtype(), DType::bf16);
  // `titan generate` loads it.
  testing::run_ok(
      kCli + " generate --checkpoint " + step_folder("model_only", 3).string() + " --prompt 'The' --max-new-tokens 4",
      workdir() / "generate.log");

  train("full", "--training.steps 3 --checkpoint.interval 2 --checkpoint.last_save_model_only false");
  EXPECT_EQ(saved("full"), (std::set<std::string>{"step-000002", "step-000003"}));
  EXPECT_TRUE(checkpoint::is_complete_checkpoint(step_folder("full", 3).string()));
  EXPECT_FALSE(fs::exists(step_folder("full", 3) / "model.safetensors"));
  // The full last save resumes: a rerun with more steps goes on from step 3.
  const std::string resumed =
      train("full", "--training.steps 4 --checkpoint.interval 2 --checkpoint.last_save_model_only false", true);
  EXPECT_NE(resumed.find("(step 3,"), std::string::npos) << resumed;
  EXPECT_EQ(losses("full").size(), 4u);
}

// The model-only last save as a Hugging Face folder: converted back by titan,
// its weights are bitwise the export's of the same run.
TEST_F(CheckpointKeys, LastSaveInHfWritesAHuggingFaceFolderTitanLoadsBack) {
  train("export", "--training.steps 2");
  train("hf", "--training.steps 2 --checkpoint.last_save_in_hf true");
  EXPECT_EQ(losses("hf"), losses("export"));
  EXPECT_EQ(saved("hf"), (std::set<std::string>{"step-000002"}));  // nothing left beside it
  const fs::path hf = step_folder("hf", 2);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
    EXPECT_TRUE(fs::is_regular_file(hf / file)) << file;
  }
  EXPECT_FALSE(fs::exists(hf / "job.toml"));
  EXPECT_NE(file_text(hf / "config.json").find("LlamaForCausalLM"), std::string::npos);
  EXPECT_TRUE(read_all_tensors(hf / "model.safetensors").count("model.layers.0.self_attn.q_proj.weight"));
  const fs::path back = workdir() / "hf_back";
  fs::remove_all(back);
  testing::run_ok(kCli + " convert --from hf " + hf.string() + " --to titan " + back.string(),
                  workdir() / "hf_back.log");
  expect_same_tensors(read_all_tensors(step_folder("export", 2) / "model.safetensors"),
                      read_all_tensors(back / "model.safetensors"));
  // checkpoint.initial_load_path takes it as it is: both start from the same weights.
  train("from_hf", "--training.steps 1 --checkpoint.enable false --checkpoint.initial_load_path " + hf.string());
  train("from_export", "--training.steps 1 --checkpoint.enable false --checkpoint.initial_load_path " +
                           step_folder("export", 2).string());
  ASSERT_EQ(losses("from_hf").size(), 1u);
  EXPECT_EQ(losses("from_hf"), losses("from_export"));
}

TEST_F(CheckpointKeys, EnableFirstStepCheckpointAlsoSavesStepOne) {
  train("first_step", "--training.steps 3 --checkpoint.enable_first_step_checkpoint true");
  EXPECT_EQ(saved("first_step"), (std::set<std::string>{"step-000001", "step-000003"}));
  EXPECT_TRUE(checkpoint::is_complete_checkpoint(step_folder("first_step", 1).string()));
  EXPECT_TRUE(is_model_export(step_folder("first_step", 3)));
}

// load_only resumes from the newest checkpoint and writes nothing: no
// interval save, no last save, the folder as it was.
TEST_F(CheckpointKeys, LoadOnlyResumesButSavesNothing) {
  const std::string full = "--checkpoint.interval 2 --checkpoint.last_save_model_only false --training.steps 8 ";
  // Stopped by a SIGTERM after step 4 (saved), as a preempted job is.
  train("load_only", full, false, "TITAN_TEST_SIGTERM_AT_STEP=4 ");
  ASSERT_EQ(saved("load_only"), (std::set<std::string>{"step-000002", "step-000004"}));
  const std::string before = file_text(step_folder("load_only", 4) / "rank-00000.safetensors");
  train("straight_8", full);
  const std::string output = train("load_only", full + "--checkpoint.load_only true", true);
  EXPECT_NE(output.find("(step 4,"), std::string::npos) << output;
  EXPECT_EQ(output.find("checkpoint of step"), std::string::npos) << output;
  EXPECT_EQ(output.find("model written to"), std::string::npos) << output;
  EXPECT_EQ(saved("load_only"), (std::set<std::string>{"step-000002", "step-000004"}));
  EXPECT_EQ(file_text(step_folder("load_only", 4) / "rank-00000.safetensors"), before);
  // Steps 5-8 are the uninterrupted run's.
  const std::vector<double> straight = losses("straight_8"), all = losses("load_only");
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(std::vector<double>(all.begin() + 4, all.end()), std::vector<double>(straight.begin() + 4, straight.end()));
}

// initial_load_path with initial_load_model_only = false restores another
// job's whole state (weights, AdamW moments, schedule, step, data position,
// RNG): its next steps and last save are the uninterrupted run's, bitwise.
// With the default (true) only the weights come: a new run from step 1.
TEST_F(CheckpointKeys, InitialLoadModelOnlyFalseRestoresTheWholeTrainingState) {
  const std::string full = "--checkpoint.interval 3 --checkpoint.last_save_model_only false ";
  train("source", full + "--training.steps 6");
  const std::string from = step_folder("source", 3).string();
  const std::string output = train("whole_state", full +
                                                      "--training.steps 6 --checkpoint.initial_load_model_only false "
                                                      "--checkpoint.initial_load_path " +
                                                      from);
  EXPECT_NE(output.find("loaded model, optimizer, lr_scheduler, dataloader, train_state from " + from + " (step 3,"),
            std::string::npos)
      << output;
  const std::vector<double> source = losses("source"), continued = losses("whole_state");
  ASSERT_EQ(source.size(), 6u);
  ASSERT_EQ(continued.size(), 3u);  // steps 4-6
  EXPECT_EQ(continued, std::vector<double>(source.begin() + 3, source.end()));
  EXPECT_EQ(saved("whole_state"), (std::set<std::string>{"step-000006"}));
  EXPECT_EQ(file_text(step_folder("whole_state", 6) / "rank-00000.safetensors"),
            file_text(step_folder("source", 6) / "rank-00000.safetensors"));
  // exclude_from_loading still applies: without the data position the batches start over.
  train("no_dataloader", full +
                             "--training.steps 4 --checkpoint.initial_load_model_only false "
                             "--checkpoint.exclude_from_loading dataloader --checkpoint.initial_load_path " +
                             from);
  ASSERT_EQ(losses("no_dataloader").size(), 1u);
  EXPECT_NE(losses("no_dataloader")[0], source[3]);

  const std::string weights_only = train("weights_only", "--training.steps 2 --checkpoint.initial_load_path " + from);
  EXPECT_NE(weights_only.find("loaded model from " + from), std::string::npos) << weights_only;
  ASSERT_EQ(losses("weights_only").size(), 2u);
  EXPECT_NE(losses("weights_only")[0], source[0]);  // the loaded weights, not this job's initial ones
}

// The refusals that need to see what initial_load_path holds name the keys
// and the folder, before any step.
TEST_F(CheckpointKeys, InitialLoadPathThatCannotMeanWhatTheKeysSayIsRefused) {
  train("weights", "--training.steps 1");
  const std::string exported = step_folder("weights", 1).string();
  ASSERT_TRUE(is_model_export(exported));
  const CommandResult not_state = train_failing("refused_state",
                                                "--training.steps 2 --checkpoint.initial_load_model_only false "
                                                "--checkpoint.initial_load_path " +
                                                    exported);
  expect_user_error(not_state, {"checkpoint.initial_load_model_only = false", exported, "titan model export"});
  EXPECT_TRUE(losses("refused_state").empty()) << not_state.output;
  const CommandResult not_hf = train_failing(
      "refused_hf",
      "--training.steps 2 --checkpoint.initial_load_in_hf true --checkpoint.initial_load_path " + exported);
  expect_user_error(not_hf, {"checkpoint.initial_load_in_hf = true", exported, "not a Hugging Face model folder"});
  const CommandResult hf_state = train_failing("refused_hf_state",
                                               "--training.steps 2 --checkpoint.last_save_in_hf true "
                                               "--checkpoint.last_save_model_only false");
  expect_user_error(hf_state, {"checkpoint.last_save_in_hf = true needs checkpoint.last_save_model_only = true"});
}

}  // namespace checkpoint_keys_test
}  // namespace titan
