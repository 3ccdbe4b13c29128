// TorchTitan's float8 keys: model.converters and the [quantize.linear.float8]
// and [quantize.linear.mx] tables load from TOML and the command line with
// TorchTitan's names, survive --print-config, and what cannot train is an
// error naming the key.
#include <gtest/gtest.h>

#include <functional>

#include "support/expect_error.h"
#include "titan/train/config_loader.h"

namespace titan {
namespace float8_config_test {

TEST(Float8Config, TorchTitansTablesLoadAndRoundTrip) {
  train::JobConfig config;
  train::load_toml_string(config, R"(
[model]
converters = ["quantize.linear.float8"]
[quantize.linear.float8]
recipe_name = "rowwise"
filter_fqns = ["output", "auto_filter_small_kn"]
emulate = true
[quantize.linear.mx]
mxfp8_dim1_cast_kernel_choice = "cuda"
[quantize.grouped_mm.float8]
fqns = []
)",
                          "job.toml");
  EXPECT_EQ(config.model.converters, std::vector<std::string>{"quantize.linear.float8"});
  EXPECT_EQ(config.quantize.float8_recipe_name, "rowwise");
  EXPECT_EQ(config.quantize.float8_filter_fqns, (std::vector<std::string>{"output", "auto_filter_small_kn"}));
  EXPECT_TRUE(config.quantize.float8_emulate);
  EXPECT_EQ(config.quantize.mx_dim1_cast_kernel_choice, "cuda");
  EXPECT_EQ(config.quantize.mx_filter_fqns, std::vector<std::string>{"output"});  // TorchTitan's default
  train::validate(config);

  train::apply_override(config, "quantize.linear.float8.recipe_name", "tensorwise");
  train::apply_override(config, "quantize.linear.mx.filter_fqns", "output,attention.wq");
  EXPECT_EQ(config.quantize.float8_recipe_name, "tensorwise");
  EXPECT_EQ(config.quantize.mx_filter_fqns, (std::vector<std::string>{"output", "attention.wq"}));

  // --print-config writes dotted keys under [quantize], which load back the same.
  const std::string text = train::config_to_toml(config);
  EXPECT_NE(text.find("linear.float8.recipe_name = \"tensorwise\""), std::string::npos) << text;
  train::JobConfig again;
  train::load_toml_string(again, text, "printed.toml");
  EXPECT_EQ(train::config_to_toml(again), text);
}

TEST(Float8Config, UnknownNestedKeysAreNamed) {
  train::JobConfig config;
  testing::expect_error(
      [&] { train::load_toml_string(config, "[quantize.linear.float8]\nrecipe = \"rowwise\"\n", "job.toml"); },
      {"job.toml:2", "unknown key quantize.linear.float8.recipe ",
       "did you mean 'quantize.linear.float8.recipe_name'"});
}

TEST(Float8Config, WhatCannotTrainNamesTheKey) {
  const std::vector<std::pair<std::function<void(train::JobConfig&)>, std::string>> cases = {
      {[](train::JobConfig& c) { c.model.converters = {"float8"}; }, "model.converters: unknown converter 'float8'"},
      {[](train::JobConfig& c) {
         c.model.converters = {"quantize.grouped_mm.float8", "quantize.grouped_mm.mx"};
       },
       "names both quantize.grouped_mm.float8 and quantize.grouped_mm.mx"},
      {[](train::JobConfig& c) {
         c.model.converters = {"quantize.linear.mx", "quantize.linear.mx"};
       },
       "model.converters names quantize.linear.mx twice"},
      {[](train::JobConfig& c) {
         c.model.converters = {"quantize.grouped_mm.mx"};
         c.quantize.grouped_mx_recipe_name = "mxfp8_cublas";
       },
       "quantize.grouped_mm.mx.recipe_name: unknown recipe 'mxfp8_cublas' (expected mxfp8)"},
      {[](train::JobConfig& c) {
         c.model.converters = {"quantize.linear.float8", "quantize.linear.mx"};
       },
       "names both"},
      {[](train::JobConfig& c) { c.quantize.float8_recipe_name = "rowwize"; },
       "quantize.linear.float8.recipe_name: unknown recipe 'rowwize'"},
      {[](train::JobConfig& c) { c.quantize.mx_recipe_name = "mxfp4"; }, "quantize.linear.mx.recipe_name"},
      {[](train::JobConfig& c) { c.quantize.mx_dim1_cast_kernel_choice = "cutlass"; },
       "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice"},
      {[](train::JobConfig& c) {
         c.model.converters = {"quantize.linear.float8"};
         c.quantize.float8_fsdp_all_gather = true;
         c.quantize.float8_recipe_name = "rowwise";
       },
       "enable_fsdp_float8_all_gather with recipe_name 'rowwise'"},
      {[](train::JobConfig& c) {
         c.model.converters = {"quantize.linear.mx"};
         c.training.local_batch_size = 1;
         c.training.seq_len = 48;
       },
       "training.local_batch_size x training.seq_len"},
  };
  for (const auto& [edit, key] : cases) {
    train::JobConfig config;
    edit(config);
    SCOPED_TRACE(key);
    testing::expect_error([&] { train::validate(config); }, {key});
  }
  // TorchTitan's grouped-GEMM tables, with a linear converter beside a grouped one.
  train::JobConfig config;
  train::apply_override(config, "quantize.grouped_mm.float8.fqns", "experts");
  train::apply_override(config, "quantize.grouped_mm.mx.fqns", "moe.experts,shared");
  EXPECT_TRUE(config.notices.empty());
  EXPECT_EQ(config.quantize.grouped_float8_fqns, std::vector<std::string>{"experts"});
  EXPECT_EQ(config.quantize.grouped_mx_fqns, (std::vector<std::string>{"moe.experts", "shared"}));
  config.model.converters = {"quantize.linear.float8", "quantize.grouped_mm.mx"};
  train::validate(config);
  config.model.converters.clear();
  // As are the float8 table's settings without the converter, whatever they hold.
  config.quantize.float8_fsdp_all_gather = true;
  config.quantize.float8_recipe_name = "rowwise";
  train::validate(config);
  // The float8 all-gather with the default recipe, its scales precomputed.
  config.model.converters = {"quantize.linear.float8"};
  config.quantize.float8_recipe_name = "";
  config.quantize.float8_precompute_scale = true;
  train::validate(config);
}

}  // namespace float8_config_test
}  // namespace titan
