// `titan convert` on a Hugging Face MuseGlimmerForConditionalGeneration folder
// (tests/reference/make_muse_glimmer_cases.py's tiny one, with two vision
// tensors): HF -> titan -> HF gives back every text tensor's bytes (f32),
// writes no vision tensor, and a config.json that describes the same model.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/peer_support.h"
#include "support/reference.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"

namespace titan {
namespace muse_glimmer_hf_convert_test {

using data::testing::run_titan;
using data::testing::shell_quote;
using data::testing::TempDir;

TEST(MuseGlimmerHfConvert, RoundTripThroughTitanIsBitwise) {
  const std::string source_folder = testing::reference_dir() + "/hf_muse_glimmer_tiny";
  const TempDir dir;
  const auto q = [&](const char* name) { return shell_quote((dir / name).string()); };
  const auto to_titan = run_titan("convert --from hf " + shell_quote(source_folder) + " --to titan " + q("titan"));
  ASSERT_EQ(to_titan.exit_code, 0) << to_titan.output;
  const auto to_hf = run_titan("convert --from titan " + q("titan") + " --to hf " + q("hf"));
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.output;

  const models::HfFolderReader source(source_folder), written((dir / "hf").string());
  const models::HfFamily& family = models::hf_family_for_model("muse_glimmer");
  size_t text_tensors = 0;
  for (const std::string& name : source.tensor_names()) {
    if (models::hf_tensor_skipped(family, name)) {
      EXPECT_FALSE(written.contains(name)) << name;
      continue;
    }
    ASSERT_TRUE(written.contains(name)) << name;
    EXPECT_EQ(written.entry(name).dtype, DType::f32) << name;
    EXPECT_EQ(written.read(name).to_floats(), source.read(name).to_floats()) << name;
    ++text_tensors;
  }
  EXPECT_EQ(written.tensor_names().size(), text_tensors);
  EXPECT_TRUE(models::decoder_config_differences(models::decoder_config_from_hf(written.config()),
                                                 models::decoder_config_from_hf(source.config()))
                  .empty());
  EXPECT_EQ(written.config().architecture, "MuseGlimmerForConditionalGeneration");
}

}  // namespace muse_glimmer_hf_convert_test
}  // namespace titan
