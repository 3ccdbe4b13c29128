// The rule behind `titan data prepare --input X --output X` destroying its own
// dataset, checked for every command that writes: an output that is, holds or
// lies inside one of the command's inputs is refused before anything is read
// or written, whether the paths are spelled the same, through "..", or
// through a symbolic link, and every input is left byte for byte as it was.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli_job.h"

namespace titan {
namespace overlap_test {

namespace fs = std::filesystem;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "overlap_test";
  return dir;
}

// Every file under `root` (or the file itself) with its bytes: what must not change.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> files;
  if (fs::is_regular_file(root)) {
    files[root.string()] = testing::file_text(root);
    return files;
  }
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file()) files[entry.path().string()] = testing::file_text(entry.path());
  }
  return files;
}

// A command that writes `output`, reading `input` (named by `input_role` in the refusal).
struct Writer {
  std::string name;
  std::string input_role;
  fs::path input;
  bool input_is_folder;
  std::function<std::string(const std::string& output)> command;
  std::string output_role;
};

class Overlap : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(workdir());
    fs::create_directories(workdir() / "corpus");
    for (const char* file : {"love", "science"}) {
      fs::copy_file(fs::path("/usr/share/games/fortunes") / file, workdir() / "corpus" / file);
    }
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
    testing::write_tiny_llama_config(workdir());
    testing::run_ok(testing::tiny_train_command(workdir() / "data", workdir() / "config.json", workdir() / "job",
                                                "--training.steps 1 --validation.enable false"),
                    workdir() / "job.log");
    testing::run_ok(
        kCli + " convert --from titan " + export_folder().string() + " --to hf " + (workdir() / "hf").string(),
        workdir() / "hf.log");
  }
  static fs::path export_folder() { return workdir() / "job" / "checkpoint" / "step-000001"; }

  static std::vector<Writer> writers() {
    const std::string fortune = " --format fortune --train-tokenizer 300";
    return {
        {"data prepare (corpus)", "--input", workdir() / "corpus", true,
         [=](const std::string& out) {
           return kCli + " data prepare --input " + (workdir() / "corpus").string() + fortune + " --output " + out;
         },
         "--output"},
        {"data prepare (tokenizer)", "--tokenizer", workdir() / "data" / "tokenizer.json", false,
         [=](const std::string& out) {
           return kCli + " data prepare --input " + (workdir() / "corpus" / "love").string() +
                  " --format fortune --tokenizer " + (workdir() / "data" / "tokenizer.json").string() + " --output " +
                  out;
         },
         "--output"},
        {"tokenizer train", "--input", workdir() / "corpus", true,
         [=](const std::string& out) {
           return kCli + " tokenizer train --input " + (workdir() / "corpus").string() +
                  " --format fortune --vocab-size 300 --output " + out;
         },
         "--output"},
        {"convert titan to hf", "source folder (--from)", export_folder(), true,
         [=](const std::string& out) {
           return kCli + " convert --from titan " + export_folder().string() + " --to hf " + out + " --force";
         },
         "--to"},
        {"convert hf to titan", "source folder (--from)", workdir() / "hf", true,
         [=](const std::string& out) {
           return kCli + " convert --from hf " + (workdir() / "hf").string() + " --to titan " + out + " --force";
         },
         "--to"},
        {"train (dataset)", "training.dataset_path", workdir() / "data", true,
         [=](const std::string& out) {
           return testing::tiny_train_command(workdir() / "data", workdir() / "config.json", workdir() / "train_job",
                                              "--training.steps 1 --checkpoint.folder " + out);
         },
         "checkpoint.folder"},
        {"train (initial weights)", "checkpoint.initial_load_path", export_folder(), true,
         [=](const std::string& out) {
           return testing::tiny_train_command(workdir() / "data", workdir() / "config.json", workdir() / "train_job",
                                              "--training.steps 1 --checkpoint.initial_load_path " +
                                                  export_folder().string() + " --checkpoint.folder " + out);
         },
         "checkpoint.folder"},
    };
  }
};

TEST_F(Overlap, EveryCommandThatWritesRefusesAnOutputOverlappingItsInput) {
  fs::create_symlink(workdir(), workdir() / "link_to_workdir");
  int cases = 0;
  for (const Writer& writer : writers()) {
    const fs::path in = writer.input;
    const fs::path relative = fs::relative(in, workdir());
    // The same path as typed, through "..", through a symbolic link; a folder holding it; one inside it.
    std::vector<std::pair<std::string, fs::path>> outputs{
        {"the input itself", in},
        {"the input through ..", in.parent_path() / "no_such_folder" / ".." / in.filename()},
        {"the input through a link", workdir() / "link_to_workdir" / relative},
        {"a folder holding the input", in.parent_path()},
    };
    if (writer.input_is_folder) outputs.push_back({"a folder inside the input", in / "inner"});
    const auto before = snapshot(in);
    for (const auto& [what, output] : outputs) {
      SCOPED_TRACE(writer.name + ": " + what + " (" + output.string() + ")");
      std::string log;
      const int status = testing::run_command(writer.command(output.string()), workdir() / "overlap.log", &log);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << log;
      EXPECT_NE(log.find(writer.output_role), std::string::npos) << log;
      EXPECT_NE(log.find(writer.input_role), std::string::npos) << log;
      EXPECT_NE(log.find("writ"), std::string::npos) << log;
      EXPECT_EQ(log.find("internal error"), std::string::npos) << log;
      EXPECT_EQ(snapshot(in), before) << "the input changed";
      EXPECT_FALSE(fs::exists(in / "inner")) << "an output was created inside the input";
      ++cases;
    }
  }
  EXPECT_EQ(cases, 7 * 4 + 6);
}

// The same commands with outputs beside their inputs run: the rule refuses
// overlaps, not neighbours ("data" and "data_2" share a prefix, not a folder).
TEST_F(Overlap, ANeighbourWithAPrefixOfTheInputsNameIsNoOverlap) {
  for (const Writer& writer : writers()) {
    if (writer.name.starts_with("train")) continue;  // train's outputs are covered by the other jobs' success
    SCOPED_TRACE(writer.name);
    const fs::path output = fs::path(writer.input.string() + "_2" + (writer.input_is_folder ? "" : ".json"));
    fs::remove_all(output);
    testing::run_ok(writer.command(output.string()), workdir() / "neighbour.log");
    EXPECT_TRUE(fs::exists(output));
    fs::remove_all(output);
  }
}

// A prepared dataset or a token shard given to prepare as text is refused:
// they are titan's own output, whose bytes would become a "dataset".
TEST_F(Overlap, PreparedDatasetsAndTokenShardsAreNotText) {
  fs::remove_all(workdir() / "elsewhere");
  for (const fs::path& input : {workdir() / "data", workdir() / "data" / "shard_00000.tshard"}) {
    SCOPED_TRACE(input.string());
    std::string log;
    const int status = testing::run_command(kCli + " data prepare --input " + input.string() +
                                                " --train-tokenizer 300 --output " + (workdir() / "elsewhere").string(),
                                            workdir() / "prepared_as_text.log", &log);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << log;
    EXPECT_NE(log.find("not text"), std::string::npos) << log;
    EXPECT_FALSE(fs::exists(workdir() / "elsewhere"));
  }
  // A folder holding a prepared dataset further down is refused too, and so is any other binary file.
  fs::create_directories(workdir() / "mixed");
  fs::copy(workdir() / "data", workdir() / "mixed" / "data");
  std::string log;
  testing::run_command(kCli + " data prepare --input " + (workdir() / "mixed").string() +
                           " --train-tokenizer 300 --output " + (workdir() / "elsewhere").string(),
                       workdir() / "mixed.log", &log);
  EXPECT_NE(log.find("is a prepared dataset"), std::string::npos) << log;
  testing::run_command(kCli + " data prepare --input " + (export_folder() / "model.safetensors").string() +
                           " --train-tokenizer 300 --output " + (workdir() / "elsewhere").string(),
                       workdir() / "binary.log", &log);
  EXPECT_NE(log.find("binary file"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(workdir() / "elsewhere"));
}

}  // namespace overlap_test
}  // namespace titan
