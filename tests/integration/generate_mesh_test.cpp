// `titan generate` under mpirun: each rank holds its tensor-parallel heads
// (and, with --dp-shard, FSDP shards gathered a block at a time) of a model
// export and they decode together. Tiny llama3, qwen3 (per-head q/k norms,
// tied embeddings), olmo2 (whole-projection q/k norms) and qwen3_5 (linear
// attention) models trained a few steps here: the tokens from TP 2 and TP 2 x FSDP 2 must be one
// process's, greedy and sampled (a sampled token depends on the whole
// distribution, not only its top). Bad degrees are refused naming the flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli_job.h"

namespace titan {
namespace generate_mesh_test {

namespace fs = std::filesystem;

const std::string kCli = TITAN_CLI_PATH;

fs::path workdir() { return testing::per_test_folder("generate_mesh_test"); }

// The ids `--ids` prints on the last line of the output.
std::vector<int64_t> generated_ids(const std::string& output) {
  std::istringstream lines(output);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) last = line;
  }
  std::vector<int64_t> ids;
  std::istringstream stream(last);
  for (int64_t id; stream >> id;) ids.push_back(id);
  return ids;
}

class GenerationOnAMesh : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fs::remove_all(workdir());
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
  }

  // A model export of family `name`, trained 30 steps.
  static fs::path export_of(const std::string& name) {
    const fs::path dump = workdir() / name;
    testing::run_ok(fmt::format("{} train --config {}/configs/llama3_debug.toml --model.name {} --model.flavor "
                                "debugmodel --job.dump_folder {} --training.dataset_path {} --model.tokenizer_path "
                                "{}/tokenizer.json --training.seq_len 128 --training.local_batch_size 4 "
                                "--training.steps 30 --validation.enable false --metrics.progress false",
                                kCli, TITAN_SOURCE_DIR, name, dump.string(), (workdir() / "data").string(),
                                (workdir() / "data").string()),
                    workdir() / (name + "_train.log"));
    return dump / "checkpoint" / "step-000030";
  }

  static std::string generate(const fs::path& model, const std::string& sampling) {
    return fmt::format("{} generate --checkpoint {} --prompt \"A wise man once said\" --max-new-tokens 24 --ids {}",
                       kCli, model.string(), sampling);
  }
};

TEST_P(GenerationOnAMesh, TokensAreOneProcesssUnderTensorAndFsdpSharding) {
  const fs::path model = export_of(GetParam());
  for (const std::string sampling : {"", "--temperature 1 --seed 7"}) {
    const std::vector<int64_t> one =
        generated_ids(testing::run_ok(generate(model, sampling), workdir() / (GetParam() + "_one.log")));
    ASSERT_FALSE(one.empty());
    for (const auto& [ranks, layout] :
         std::vector<std::pair<int, std::string>>{{2, "--tp 2"}, {4, "--tp 2 --dp-shard 2"}}) {
      const std::string output = testing::run_ok(testing::mpirun(ranks, generate(model, sampling + " " + layout)),
                                                 workdir() / (GetParam() + "_mesh.log"));
      EXPECT_EQ(generated_ids(output), one) << GetParam() << " " << layout << " " << sampling << "\n" << output;
    }
  }
}

// qwen3_5: its Gated DeltaNet layers split by heads, each rank caching its
// heads' conv inputs and recurrent states.
INSTANTIATE_TEST_SUITE_P(Families, GenerationOnAMesh, ::testing::Values("llama3", "qwen3", "olmo2", "qwen3_5"));

// gpt-oss (testing::write_tiny_gpt_oss_config), trained 30 steps so that its
// zero-drawn biases have moved: under TP the attention output's bias is added
// once, after the ranks' partial outputs are summed, and the sinks split
// with the query heads. Greedy and sampled tokens must be one process's.
TEST(GenerationOnAMeshGptOss, TokensAreOneProcesssUnderTensorAndFsdpSharding) {
  const fs::path dir = workdir();
  fs::remove_all(dir);
  fs::create_directories(dir);
  testing::prepare_test_corpus(dir / "data", dir / "prepare.log");
  const fs::path config = testing::write_tiny_gpt_oss_config(dir / "gpt_oss_tiny");
  testing::run_ok(fmt::format("{} train --config {}/configs/llama3_debug.toml --model.hf_config {} --job.dump_folder "
                              "{} --training.dataset_path {} --model.tokenizer_path {}/tokenizer.json "
                              "--training.seq_len 64 --training.local_batch_size 4 --training.steps 30 "
                              "--validation.enable false --metrics.progress false",
                              kCli, TITAN_SOURCE_DIR, config.string(), (dir / "job").string(), (dir / "data").string(),
                              (dir / "data").string()),
                  dir / "train.log");
  const fs::path model = dir / "job" / "checkpoint" / "step-000030";
  for (const std::string sampling : {"", "--temperature 1 --seed 7"}) {
    const std::string generate =
        fmt::format("{} generate --checkpoint {} --prompt \"A wise man once said\" --max-new-tokens 24 --ids {}", kCli,
                    model.string(), sampling);
    const std::vector<int64_t> one = generated_ids(testing::run_ok(generate, dir / "one.log"));
    ASSERT_FALSE(one.empty());
    for (const auto& [ranks, layout] :
         std::vector<std::pair<int, std::string>>{{2, "--tp 2"}, {4, "--tp 2 --dp-shard 2"}}) {
      const std::string output = testing::run_ok(testing::mpirun(ranks, generate + " " + layout), dir / "mesh.log");
      EXPECT_EQ(generated_ids(output), one) << layout << " " << sampling << "\n" << output;
    }
  }
}

TEST(GenerationOnAMeshErrors, DegreesMustMatchTheProcesses) {
  const fs::path dir = workdir();
  fs::create_directories(dir);
  // The degrees are checked before the export is read.
  testing::expect_user_error(
      testing::run_to_completion(kCli + " generate --checkpoint " + dir.string() + " --prompt x --tp 2",
                                 dir / "no_launcher.log"),
      {"--tp 2 x --dp-shard 1 = 2 ranks", "1 process(es)", "mpirun -np N"});
  testing::expect_user_error(
      testing::run_to_completion(
          testing::mpirun(2, kCli + " generate --checkpoint " + dir.string() + " --prompt x --tp 2 --dp-shard 2"),
          dir / "mismatch.log"),
      {"--tp 2 x --dp-shard 2 = 4 ranks", "2 process(es)"});
}

}  // namespace generate_mesh_test
}  // namespace titan
