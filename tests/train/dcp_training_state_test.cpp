// A whole training state through a PyTorch Distributed Checkpoint, as
// TorchTitan lays one out (train/dcp_training_state.h), on real `titan train`
// runs of the debug Llama: titan trains 3 steps and saves its full state;
// `titan convert --to dcp` writes it as a DCP folder; the PyTorch side
// (tests/reference/dcp_reference.py) reads it, tensors equal, loads it into
// real torch.optim.AdamW and LambdaLR objects as TorchTitan would (every key
// they ask for must be there) and saves their state dicts again over two
// ranks. Titan resumes from that folder with initial_load_model_only = false:
// its next 5 steps and its last save are bitwise those of a titan run resumed
// from its own step-3 checkpoint. Folders that do not hold AdamW's state of
// this model are refused naming the item.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "data/peer_support.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/checkpoint/chunk_file.h"
#include "titan/checkpoint/dcp_folder.h"
#include "titan/checkpoint/safetensors.h"

namespace titan {
namespace dcp_training_state_test {

namespace fs = std::filesystem;
using data::testing::CommandResult;
using data::testing::run_command;
using data::testing::run_titan;
using data::testing::shell_quote;
using data::testing::TempDir;

std::string reference(const std::string& arguments) {
  return std::string(TITAN_PYTHON) + " " + shell_quote(std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/dcp_reference.py") +
         " " + arguments;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Every tensor of a titan checkpoint step folder, whole.
std::map<std::string, Tensor> step_folder_tensors(const fs::path& folder) {
  const std::string text = file_bytes(folder / checkpoint::kMetadataFile);
  const checkpoint::CheckpointMetadata metadata = checkpoint::parse_checkpoint_metadata(text, folder.string());
  checkpoint::ChunkReader reader(folder.string(), metadata);
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, tensor] : metadata.tensors) {
    Tensor whole = Tensor::empty(tensor.shape, tensor.dtype);
    reader.read_box(name, whole, tensor.shape, Shape(tensor.shape.size(), 0));
    tensors[name] = whole;
  }
  return tensors;
}

std::vector<double> losses(const fs::path& dump) {
  std::vector<double> values;
  std::ifstream metrics(dump / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("step")) values.push_back(record["loss"]);
  }
  return values;
}

class DcpTrainingState : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto prepare = run_titan(
        "data prepare --input /usr/share/games/fortunes/debian --format fortune "
        "--train-tokenizer 300 --output " +
        shell_quote((*dir_ / "data").string()));
    ASSERT_EQ(prepare.exit_code, 0) << prepare.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path path(const std::string& name) { return *dir_ / name; }
  // `titan train` of the debug Llama into dump folder `name`, f32 so that runs of the same steps are bitwise equal;
  // the full state saved at step 3 and at the last step; one LR schedule over 8 steps for every run.
  static CommandResult train(const std::string& name, const std::string& extra) {
    const fs::path data = path("data");
    return run_titan(
        "train --config " + shell_quote(std::string(TITAN_SOURCE_DIR) + "/configs/llama3_debug.toml") +
        " --job.dump_folder " + shell_quote(path(name).string()) + " --training.dataset_path " +
        shell_quote(data.string()) + " --model.tokenizer_path " + shell_quote((data / "tokenizer.json").string()) +
        " --training.seq_len 32 --training.local_batch_size 2 --lr_scheduler.warmup_steps 2 "
        "--lr_scheduler.total_steps 8 --metrics.peak_tflops 1 --metrics.progress false --metrics.log_freq 1 "
        "--validation.enable false --training.mixed_precision_param f32 --model.document_masking false "
        "--checkpoint.interval 3 --checkpoint.last_save_model_only false " +
        extra);
  }
  static fs::path step_folder(const std::string& name, int64_t step) {
    return path(name) / "checkpoint" / checkpoint::step_folder_name(step);
  }
  static TempDir* dir_;
};

TempDir* DcpTrainingState::dir_ = nullptr;

TEST_F(DcpTrainingState, TitanToPyTorchAndBackResumesBitwise) {
  const auto source = train("source", "--training.steps 3");
  ASSERT_EQ(source.exit_code, 0) << source.output;
  const fs::path step3 = step_folder("source", 3);
  ASSERT_TRUE(checkpoint::is_complete_checkpoint(step3.string()));
  // The reference: titan resumed from its own step-3 checkpoint.
  const auto titan_resume = train("titan_resume",
                                  "--training.steps 8 --checkpoint.initial_load_model_only false "
                                  "--checkpoint.initial_load_path " +
                                      shell_quote(step3.string()));
  ASSERT_EQ(titan_resume.exit_code, 0) << titan_resume.output;

  // The step folder as TorchTitan's DCP layout, read by PyTorch: every tensor equal.
  const auto convert =
      run_titan("convert --from titan " + shell_quote(step3.string()) + " --to dcp " + shell_quote(path("dcp")));
  ASSERT_EQ(convert.exit_code, 0) << convert.output;
  const auto read = run_command(reference("read " + shell_quote(path("dcp")) + " " + shell_quote(path("torch.st"))));
  ASSERT_EQ(read.exit_code, 0) << read.output;
  const checkpoint::SafetensorsReader torch_read(path("torch.st").string());
  const std::map<std::string, Tensor> titan = step_folder_tensors(step3);
  size_t moments = 0;
  for (const auto& [name, tensor] : titan) {
    std::string key;
    if (name.rfind("model.", 0) == 0) {
      key = name.substr(6);
    } else {
      // "optimizer.exp_avg.<fqn>" -> "optimizer.state.<fqn>.exp_avg"
      const std::string rest = name.substr(10);
      const size_t dot = rest.find('.');
      key = "optimizer.state." + rest.substr(dot + 1) + "." + rest.substr(0, dot);
      ++moments;
      ASSERT_TRUE(torch_read.contains("optimizer.state." + rest.substr(dot + 1) + ".step")) << name;
      EXPECT_EQ(torch_read.read("optimizer.state." + rest.substr(dot + 1) + ".step").item(), 3.0) << name;
    }
    ASSERT_TRUE(torch_read.contains(key)) << key;
    EXPECT_TRUE(bitwise_equal(torch_read.read(key), tensor)) << key;
  }
  EXPECT_GT(moments, 0u);
  for (const char* line : {"bytes train_state.step 3\n", "bytes lr_scheduler.last_epoch 3\n",
                           "bytes lr_scheduler._step_count 4\n", "bytes lr_scheduler.base_lrs [0.002]\n",
                           "bytes optimizer.param_groups.layers.0.attention.wq.weight.betas "
                           "(0.9, 0.95)\n",
                           "bytes optimizer.param_groups.layers.0.attention.wq.weight.weight_decay 0.1\n",
                           "bytes optimizer.param_groups.tok_embeddings.weight.weight_decay 0.0\n",
                           "bytes optimizer.param_groups.layers.0.attention.wq.weight.initial_lr 0.002\n"})
    EXPECT_NE(read.output.find(line), std::string::npos) << line << read.output;

  // Loaded into PyTorch's AdamW and LambdaLR as TorchTitan loads it, and saved again over two ranks.
  const auto resave =
      run_command(reference("resave " + shell_quote(path("dcp")) + " " + shell_quote(path("dcp2")) + " 2"));
  ASSERT_EQ(resave.exit_code, 0) << resave.output;
  EXPECT_NE(resave.output.find("over 2 ranks"), std::string::npos) << resave.output;
  const checkpoint::DcpFolderReader resaved(path("dcp2").string());
  EXPECT_EQ(resaved.tensor("tok_embeddings.weight").chunks.size(), 2u);
  EXPECT_EQ(resaved.tensor("optimizer.state.layers.0.feed_forward.w1.weight.exp_avg_sq").chunks.size(), 2u);

  // Titan resumes from PyTorch's folder: the same next 5 steps and last save, bit for bit.
  const auto dcp_resume = train("dcp_resume",
                                "--training.steps 8 --checkpoint.initial_load_model_only false "
                                "--checkpoint.initial_load_path " +
                                    shell_quote(path("dcp2").string()));
  ASSERT_EQ(dcp_resume.exit_code, 0) << dcp_resume.output;
  EXPECT_NE(dcp_resume.output.find("loaded model, optimizer, lr_scheduler, dataloader, train_state from " +
                                   path("dcp2").string() + " (step 3, a PyTorch Distributed Checkpoint"),
            std::string::npos)
      << dcp_resume.output;
  // TorchTitan's one parameter group took its first parameter's weight decay (the embedding's 0): named, not applied.
  EXPECT_NE(dcp_resume.output.find("warning: " + path("dcp2").string() + ": 'optimizer.param_groups."),
            std::string::npos)
      << dcp_resume.output;
  const std::vector<double> expected = losses(path("titan_resume")), actual = losses(path("dcp_resume"));
  ASSERT_EQ(expected.size(), 5u);
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(file_bytes(step_folder("dcp_resume", 8) / "rank-00000.safetensors"),
            file_bytes(step_folder("titan_resume", 8) / "rank-00000.safetensors"));

  // --from dcp --to titan stays a model export: the weights alone, equal.
  const auto back =
      run_titan("convert --from dcp " + shell_quote(path("dcp2")) + " --to titan " + shell_quote(path("back")) +
                " --job-config " + shell_quote((step3 / "job.toml").string()));
  ASSERT_EQ(back.exit_code, 0) << back.output;
  const checkpoint::SafetensorsReader exported((path("back") / "model.safetensors").string());
  size_t weights = 0;
  for (const auto& entry : exported.header().entries) {
    EXPECT_TRUE(bitwise_equal(exported.read(entry.name), titan.at("model." + entry.name))) << entry.name;
    ++weights;
  }
  EXPECT_EQ(weights, titan.size() - moments);
  // A training checkpoint converts bit for bit: no --dtype.
  const auto bf16 = run_titan("convert --from titan " + shell_quote(step3.string()) + " --to dcp " +
                              shell_quote(path("dcp_bf16")) + " --dtype bf16");
  EXPECT_NE(bf16.exit_code, 0);
  EXPECT_NE(bf16.output.find("--dtype"), std::string::npos) << bf16.output;
  EXPECT_FALSE(fs::exists(path("dcp_bf16")));
}

// Folders that are not AdamW's training state of this model: refused before
// any step, naming the folder's .metadata and the item.
TEST_F(DcpTrainingState, MismatchedLayoutsAreRefusedNamingTheItem) {
  const auto source = train("mismatch_source", "--training.steps 3");
  ASSERT_EQ(source.exit_code, 0) << source.output;
  const auto convert = run_titan("convert --from titan " + shell_quote(step_folder("mismatch_source", 3).string()) +
                                 " --to dcp " + shell_quote(path("mismatch_dcp")));
  ASSERT_EQ(convert.exit_code, 0) << convert.output;
  const std::string wq = "layers.0.attention.wq.weight";
  const std::map<std::string, std::vector<std::string>> cases{
      {"drop_moment", {"missing tensor 'optimizer.state." + wq + ".exp_avg_sq'"}},
      {"moment_shape", {"'optimizer.state." + wq + ".exp_avg' has shape [128, 256]", "[256, 256]"}},
      {"sgd_state", {"'optimizer.state.tok_embeddings.weight.momentum_buffer' is not AdamW's state"}},
      {"model_only", {"no item 'train_state.step'", "initial_load_model_only = true"}},
      {"schedule_position", {"'lr_scheduler.last_epoch' is 5 but 'train_state.step' is 3"}},
  };
  for (const auto& [kind, fragments] : cases) {
    const fs::path folder = path("mismatch_" + kind);
    const auto made = run_command(
        reference("mismatch " + shell_quote(path("mismatch_dcp")) + " " + shell_quote(folder.string()) + " " + kind));
    ASSERT_EQ(made.exit_code, 0) << made.output;
    const auto run = train("mismatch_run_" + kind,
                           "--training.steps 4 --checkpoint.initial_load_model_only false "
                           "--checkpoint.initial_load_path " +
                               shell_quote(folder.string()));
    EXPECT_NE(run.exit_code, 0) << kind;
    EXPECT_NE(run.output.find((folder / ".metadata").string()), std::string::npos) << kind << run.output;
    for (const std::string& fragment : fragments)
      EXPECT_NE(run.output.find(fragment), std::string::npos) << kind << ": '" << fragment << "' in " << run.output;
    EXPECT_TRUE(losses(path("mismatch_run_" + kind)).empty()) << kind;
  }
}

}  // namespace dcp_training_state_test
}  // namespace titan
