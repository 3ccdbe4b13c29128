// The [chat] section: its keys load from TOML and the command line, are
// parsed once into typed options (chat_options), and bad values are errors
// naming the key.
#include <gtest/gtest.h>

#include "titan/core/error.h"
#include "titan/train/config_loader.h"

namespace titan::train {
namespace chat_config_test {

TEST(ChatConfig, KeysLoadAndParse) {
  JobConfig config;
  EXPECT_FALSE(chat_options(config).has_value());  // off by default
  load_toml_string(config, "[chat]\nenable = true\ntemplate = \"qwen3\"\ntrain_on = \"all\"\noverlong = \"drop\"\n",
                   "job.toml");
  apply_override(config, "chat.overlong", "truncate");
  validate(config);
  const auto options = chat_options(config);
  ASSERT_TRUE(options.has_value());
  EXPECT_EQ(options->chat_template, "qwen3");
  EXPECT_EQ(options->train_on, data::ChatTrainOn::all);
  EXPECT_EQ(options->overlong, data::ChatOverlong::truncate);
  EXPECT_EQ(options->max_tokens, 0u);  // the loader's seq_len
  EXPECT_NE(config_to_toml(config).find("[chat]\nenable = true"), std::string::npos);
  EXPECT_NE(config_help().find("train_on"), std::string::npos);
}

TEST(ChatConfig, BadValuesNameTheKey) {
  auto refused = [](const std::string& key, const std::string& value) {
    JobConfig config;
    apply_override(config, key, value);
    try {
      validate(config);  // checked even with chat off: a typo shows before it matters
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what();
    }
  };
  refused("chat.train_on", "assistants");
  refused("chat.overlong", "cut");
  JobConfig config;
  EXPECT_THROW(load_toml_string(config, "[chat]\ntemplates = \"llama3\"\n", "job.toml"), Error);
}

}  // namespace chat_config_test
}  // namespace titan::train
