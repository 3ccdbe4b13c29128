// A family is one folder and one line. scripts/new_family.sh starts a "toy"
// family from mistral; this binary is compiled with the files that read the
// family list (the registry, the Hugging Face family list) and the toy's own
// taken from a copy of src/ where the script ran (tests/CMakeLists.txt), and
// checks that toy is then a family like any other: registered with its
// flavors, read and written as its own Hugging Face architecture, and trained
// step for step as its template is. It also counts what the script touches
// outside the family's folder: one file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "data/peer_support.h"
#include "titan/models/hf/hf_config.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/model_spec.h"
#include "titan/train/random_batches.h"
#include "titan/train/trainer.h"

namespace titan {
namespace {

namespace fs = std::filesystem;

std::string contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Paths (relative to `root`) of the files under root/src that differ from, or are missing in, `reference`/src.
std::set<std::string> changed_files(const fs::path& reference, const fs::path& root) {
  std::set<std::string> changed;
  for (const auto& entry : fs::recursive_directory_iterator(root / "src")) {
    if (!entry.is_regular_file()) continue;
    const fs::path relative = fs::relative(entry.path(), root);
    const fs::path original = reference / relative;
    if (!fs::exists(original) || contents(original) != contents(entry.path())) changed.insert(relative.string());
  }
  return changed;
}

TEST(NewFamily, TouchesOneFileOutsideItsFolder) {
  const data::testing::TempDir scratch;
  const fs::path root = scratch.path();
  fs::copy(fs::path(TITAN_SOURCE_DIR) / "src", root / "src", fs::copy_options::recursive);
  fs::copy_file(fs::path(TITAN_SOURCE_DIR) / ".clang-format", root / ".clang-format");
  const auto result = data::testing::run_command(std::string(TITAN_SOURCE_DIR) + "/scripts/new_family.sh toy mistral " +
                                                 data::testing::shell_quote(root.string()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::set<std::string> outside;
  int inside = 0;
  for (const std::string& file : changed_files(TITAN_SOURCE_DIR, root)) {
    if (file.starts_with("src/titan/models/toy/")) {
      ++inside;
    } else {
      outside.insert(file);
    }
  }
  EXPECT_EQ(outside, std::set<std::string>{"src/titan/models/families.h"});
  EXPECT_GE(inside, 4);  // flavors.{h,cpp}, hf_family.{h,cpp}
  // A second family of the same name is refused, naming it.
  const auto again = data::testing::run_command(std::string(TITAN_SOURCE_DIR) + "/scripts/new_family.sh toy mistral " +
                                                data::testing::shell_quote(root.string()));
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("'toy' exists already"), std::string::npos) << again.output;
}

TEST(NewFamily, IsRegisteredWithItsFlavorsAndHuggingFaceArchitecture) {
  const std::vector<std::string> names = models::model_names();
  ASSERT_NE(std::find(names.begin(), names.end(), "toy"), names.end());
  const models::ModelSpec& toy = models::model_spec("toy");
  EXPECT_EQ(toy.flavors, models::model_spec("mistral").flavors);
  EXPECT_TRUE(toy.from_hf_config);
  const models::HfFamily& family = models::hf_family_for_model("toy");
  EXPECT_EQ(family.architecture, "ToyForCausalLM");
  EXPECT_EQ(family.model_type, "toy");
  // Its config.json goes out and comes back as its own architecture, the same model.
  const models::DecoderConfig config = models::model_config("toy", "debugmodel");
  const models::HfConfig hf = models::hf_config_from_decoder("toy", config, DType::f32);
  const models::HfConfig parsed = models::parse_hf_config(models::hf_config_json(hf), "toy config.json");
  EXPECT_EQ(parsed.architecture, "ToyForCausalLM");
  EXPECT_EQ(models::hf_family(parsed).model, "toy");
  EXPECT_EQ(models::decoder_config_from_hf(parsed).n_layers(), config.n_layers());
}

std::vector<double> losses(const std::string& model) {
  train::JobConfig config;
  config.job.dump_folder = ::testing::TempDir() + "/new_family_" + model;
  config.model.name = model;
  config.model.flavor = "debugmodel";
  config.model.vocab_size = 300;
  config.training.seq_len = 64;
  config.training.local_batch_size = 2;
  config.training.steps = 3;
  config.metrics.peak_tflops = 1.0;
  config.metrics.progress = false;
  config.checkpoint.enable = false;
  config.validation.enable = false;
  train::Trainer trainer(config, train::random_token_batches(2, 64, 300, 7));
  std::vector<double> out;
  for (const train::StepMetrics& m : trainer.train()) out.push_back(m.loss);
  return out;
}

TEST(NewFamily, TrainsStepForStepAsItsTemplate) { EXPECT_EQ(losses("toy"), losses("mistral")); }

}  // namespace
}  // namespace titan
